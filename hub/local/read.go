package local

import (
	"bufio"
	"errors"
	"hash/fnv"
	"net/http"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/cache"
	"nodehub/wire"
)

// lookup finds a cached object in the first owner's cache that has it.
func (p *Proxy) lookup(req *Request) (cache.Item, string, error) {
	ri := req.Info
	for _, owner := range req.Owners {
		k := cache.Key{Resource: resource(owner, ri), Namespace: namespace(ri), Name: ri.Name}
		it, err := p.Store.GetObject(k)
		if err == nil {
			return it, owner, nil
		}
		if !errors.Is(err, cache.ErrNotFound) && !errors.Is(err, cache.ErrBadKey) {
			return cache.Item{}, "", err
		}
	}
	return cache.Item{}, "", cache.ErrNotFound
}

func (p *Proxy) get(w http.ResponseWriter, req *Request) {
	f, ok := choose(req.Accept)
	if !ok {
		p.status(w, req, http.StatusNotAcceptable, "nodehub: none of the accepted media types can be served offline")
		return
	}
	it, _, ok := p.lookupOrAnswer(w, req)
	if !ok {
		return
	}
	if f.meta {
		pom, err := wire.PartialObjectMetadata(it.Body)
		var body []byte
		if err == nil {
			body, err = wire.EncodeMeta(pom, "PartialObjectMetadata", f.protobuf)
		}
		if err != nil {
			p.status(w, req, http.StatusInternalServerError, err.Error())
			return
		}
		writeBody(w, http.StatusOK, f.contentType(false), body)
		return
	}
	body, pb, err := encodeItem(rewritten(p.served(req.Info), it.Body), f, req.Accept)
	if err != nil {
		p.status(w, req, http.StatusNotAcceptable, "nodehub: "+err.Error())
		return
	}
	if ri := req.Info; p.KubeletNode != nil && req.Shared && ri.Component == "kubelet" && ri.Group == "" && ri.Resource == "nodes" && ri.Name == p.NodeName {
		body = p.KubeletNode(body)
	}
	writeBody(w, http.StatusOK, format{protobuf: pb}.contentType(false), body)
}

// listPlan is an offline list about to be written: the owner's cache it comes from (the first
// of the request's owners that has ever seen it: a record of it, or any object of the
// resource) and what its first item says. Nothing of the items is held: they are read again,
// one file at a time, while the answer is written.
type listPlan struct {
	res      cache.Resource
	sel      wire.Selector
	record   *cache.ListRecord
	av, kind string // the items' (the first item's, else the record's)
	empty    bool   // no item is selected
	storedPB bool   // the first item is stored in protobuf (all of a resource are in one format)
}

// format decides the format the items are written in: the one the client prefers when the
// items are in it or can be converted to it, else the stored one when the client takes that.
func (pl *listPlan) format(f format, accept []wire.MediaType) bool {
	if pl.empty || pl.storedPB == f.protobuf || wire.NewTyped(pl.av, pl.kind) != nil || !accepts(accept, pl.storedPB) {
		return f.protobuf
	}
	return pl.storedPB
}

// errFirst stops a scan at its first item.
var errFirst = errors.New("local: first item found")

// planList finds where the request's list is read from, reading at most one object per owner.
func (p *Proxy) planList(req *Request) (*listPlan, error) {
	ri := req.Info
	sel, err := wire.NewSelector(namespace(ri), ri.LabelSelector, ri.FieldSelector)
	if err != nil {
		return nil, &statusError{http.StatusBadRequest, err.Error()}
	}
	for _, owner := range req.Owners {
		pl := &listPlan{res: resource(owner, ri), sel: sel, empty: true}
		res, err := p.Store.EachInList(pl.res, sel, func(it cache.Item) error {
			pl.av, pl.kind, pl.empty = it.Header.APIVersion, it.Header.Kind, false
			pl.storedPB = len(it.Body) > 0 && it.Body[0] != '{'
			return errFirst
		})
		if err != nil && !errors.Is(err, errFirst) {
			return nil, err
		}
		pl.record = res.Record
		if pl.empty && res.Record != nil {
			pl.av, pl.kind = res.Record.APIVersion, res.Record.Kind
		}
		if res.Record != nil || !pl.empty {
			return pl, nil
		}
	}
	return nil, nil
}

// each calls fn for every item of the list, one file at a time.
func (p *Proxy) each(pl *listPlan, fn func(cache.Item) error) (cache.ListResult, error) {
	return p.Store.EachInList(pl.res, pl.sel, fn)
}

// lookupOrAnswer finds the request's object, or answers 404 (or the error) and says false.
func (p *Proxy) lookupOrAnswer(w http.ResponseWriter, req *Request) (cache.Item, string, bool) {
	it, owner, err := p.lookup(req)
	if err == nil {
		return it, owner, true
	}
	if errors.Is(err, cache.ErrNotFound) {
		p.notFound(w, req)
	} else {
		p.status(w, req, http.StatusInternalServerError, err.Error())
	}
	return it, "", false
}

// planOrAnswer plans the request's list, or answers 404 (or the error) and says false.
func (p *Proxy) planOrAnswer(w http.ResponseWriter, req *Request) (*listPlan, bool) {
	pl, err := p.planList(req)
	if err == nil && pl != nil {
		return pl, true
	}
	p.answerError(w, req, err, http.StatusInternalServerError)
	return nil, false
}

// answerError answers a statusError with its own code, any other error with code, and no error
// (nothing found) with 404.
func (p *Proxy) answerError(w http.ResponseWriter, req *Request, err error, code int) {
	var se *statusError
	switch {
	case errors.As(err, &se):
		p.status(w, req, se.code, se.msg)
	case err != nil:
		p.status(w, req, code, "nodehub: "+err.Error())
	default:
		p.notFound(w, req)
	}
}

type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return e.msg }

// list answers a list from the cache, streamed: the items are read and written one at a time,
// so memory does not grow with the list (JSON in one pass; protobuf, whose envelope announces
// the list's length, in two: one to size, one to write).
func (p *Proxy) list(w http.ResponseWriter, r *http.Request, req *Request) {
	f, ok := choose(req.Accept)
	if !ok {
		p.status(w, req, http.StatusNotAcceptable, "nodehub: none of the accepted media types can be served offline")
		return
	}
	release, ok := p.acquire(r, req)
	if !ok {
		return
	}
	defer release()
	pl, ok := p.planOrAnswer(w, req)
	if !ok {
		return
	}
	rewrite := p.served(req.Info) // one view for the whole answer (protobuf reads the items twice)
	if !f.meta && pl.format(f, req.Accept) && p.gatheredProtoList(w, req, pl, rewrite) {
		return
	}
	if !p.kubeletMayList(w, req, pl) {
		return
	}
	if f.meta {
		p.metaList(w, req, pl, f)
		return
	}
	if pl.format(f, req.Accept) {
		p.protoList(w, req, pl, rewrite)
		return
	}
	p.jsonList(w, pl, rewrite)
}

// kubeletMayList answers kubelet's list of pods (a LIST, or a watch-list's initial events) with
// an error and says false when kubelet must not be given it. The list (small: the node's pods) is
// read once before it is answered, so that one kubelet would act on wrongly is never started.
func (p *Proxy) kubeletMayList(w http.ResponseWriter, req *Request, pl *listPlan) bool {
	if ri := req.Info; ri.Component != "kubelet" || ri.Resource != "pods" || ri.Group != "" {
		return true
	}
	res, err := p.each(pl, func(cache.Item) error { return nil })
	if err != nil {
		p.status(w, req, http.StatusInternalServerError, "nodehub: "+err.Error())
		return false
	}
	return p.kubeletMayUse(w, req, pl, res)
}

// kubeletMayUse is kubeletMayList once the list was read (res).
func (p *Proxy) kubeletMayUse(w http.ResponseWriter, req *Request, pl *listPlan, res cache.ListResult) bool {
	if ri := req.Info; ri.Component != "kubelet" || ri.Resource != "pods" || ri.Group != "" {
		return true
	}
	if !kubeletCanUse(pl, res) {
		p.status(w, req, http.StatusServiceUnavailable, "nodehub: the cloud is unreachable and this node's cached pods cannot be read")
		return false
	}
	return true
}

// kubeletCanUse reports whether kubelet may be given this pod list: an empty one makes kubelet
// kill the node's pods, so it is never invented where the cloud had pods; nor a partial one (an
// object unreadable, a write that failed): the missing pods would die.
func kubeletCanUse(pl *listPlan, res cache.ListResult) bool {
	return !res.Partial && !(res.Count == 0 && pl.record != nil && len(pl.record.Keys) > 0)
}

// listBuffer is the buffer between the items read and the client (written out when full).
const listBuffer = 32 << 10

// DefaultWriteTimeout is Proxy.WriteTimeout's default.
const DefaultWriteTimeout = 30 * time.Second

func (p *Proxy) writeTimeout() time.Duration {
	if p.WriteTimeout > 0 {
		return p.WriteTimeout
	}
	return DefaultWriteTimeout
}

func (p *Proxy) startList(w http.ResponseWriter, ct string, length int) *bufio.Writer {
	h := w.Header()
	h.Set("Content-Type", ct)
	if length >= 0 {
		h.Set("Content-Length", strconv.Itoa(length))
	}
	h.Set("Cache-Control", "no-cache, private")
	w.WriteHeader(http.StatusOK)
	return bufio.NewWriterSize(&deadlineWriter{w: w, rc: http.NewResponseController(w), d: p.writeTimeout()}, listBuffer)
}

// clearWriteDeadline lifts what deadlineWriter set: the connection may serve another request.
func clearWriteDeadline(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
}

// deadlineWriter gives every write its deadline (where the writer supports deadlines).
type deadlineWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	_ = d.rc.SetWriteDeadline(time.Now().Add(d.d))
	return d.w.Write(p)
}

func (p *Proxy) jsonList(w http.ResponseWriter, pl *listPlan, rewrite func([]byte) []byte) {
	defer clearWriteDeadline(w)
	bw := p.startList(w, format{}.contentType(false), -1)
	_, _ = bw.Write(wire.JSONListHead(pl.av, pl.kind))
	n := 0
	res, err := p.each(pl, func(it cache.Item) error {
		raw, err := wire.Convert(rewritten(rewrite, it.Body), false)
		if err != nil {
			p.log().Debug("offline list: item skipped", "name", it.Header.Name, "err", err)
			return nil
		}
		if n > 0 {
			_ = bw.WriteByte(',')
		}
		n++
		_, err = bw.Write(wire.JSONListItem(raw))
		return err // the client went away: stop reading
	})
	if err != nil {
		panic(http.ErrAbortHandler) // the answer is cut: the client must not take it as whole
	}
	_, _ = bw.Write(wire.JSONListTail(res.ResourceVersion))
	_ = bw.Flush()
}

// sized is an item as the sizing pass saw it.
type sized struct {
	key uint64 // hash of namespace/name
	n   int    // length of its message
}

func itemKey(h *cache.Header) uint64 {
	f := fnv.New64a()
	_, _ = f.Write([]byte(h.Namespace))
	_, _ = f.Write([]byte{0})
	_, _ = f.Write([]byte(h.Name))
	return f.Sum64()
}

func (p *Proxy) protoList(w http.ResponseWriter, req *Request, pl *listPlan, rewrite func([]byte) []byte) {
	var items []sized
	total := 0
	res, err := p.each(pl, func(it cache.Item) error {
		n, err := wire.ProtoItemSize(rewritten(rewrite, it.Body))
		if err != nil {
			p.log().Debug("offline list: item skipped", "name", it.Header.Name, "err", err)
			return nil
		}
		items = append(items, sized{itemKey(it.Header), n})
		total += wire.ProtoListItemLen(n)
		return nil
	})
	if err != nil {
		p.status(w, req, http.StatusInternalServerError, "nodehub: "+err.Error())
		return
	}
	defer clearWriteDeadline(w)
	meta := wire.ProtoListMeta(res.ResourceVersion)
	listLen := len(meta) + total
	head, tail := wire.ProtoListHead(pl.av, pl.kind, listLen), wire.ProtoListTail()
	bw := p.startList(w, format{protobuf: true}.contentType(false), len(head)+listLen+len(tail))
	_, _ = bw.Write(head)
	_, _ = bw.Write(meta)
	// The items are read again; one that changed or went since the sizing pass is left out and
	// its bytes padded, so the length announced stays true. One that came since is not in it.
	next, written := 0, 0
	_, err = p.each(pl, func(it cache.Item) error {
		k := itemKey(it.Header)
		at := -1
		for j := next; j < len(items); j++ {
			if items[j].key == k {
				at = j
				break
			}
		}
		if at < 0 {
			return nil
		}
		next = at + 1
		msg, err := wire.ProtoItem(rewritten(rewrite, it.Body))
		if err != nil || len(msg) != items[at].n {
			return nil
		}
		written += wire.ProtoListItemLen(len(msg))
		if _, err := bw.Write(wire.ProtoListItemHead(len(msg))); err != nil {
			return err
		}
		_, err = bw.Write(msg)
		return err
	})
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_, _ = bw.Write(wire.ProtoPadding(total - written))
	_, _ = bw.Write(tail)
	_ = bw.Flush()
}

// metaList answers as=PartialObjectMetadataList: only the items' metadata is held.
func (p *Proxy) metaList(w http.ResponseWriter, req *Request, pl *listPlan, f format) {
	out := &metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadataList"}}
	res, err := p.each(pl, func(it cache.Item) error {
		if pom, err := wire.PartialObjectMetadata(it.Body); err == nil {
			out.Items = append(out.Items, *pom)
		}
		return nil
	})
	if err != nil {
		p.status(w, req, http.StatusInternalServerError, err.Error())
		return
	}
	out.ResourceVersion = res.ResourceVersion
	body, err := wire.EncodeMeta(out, "PartialObjectMetadataList", f.protobuf)
	if err != nil {
		p.status(w, req, http.StatusInternalServerError, err.Error())
		return
	}
	writeBody(w, http.StatusOK, f.contentType(true), body)
}

// discovery answers /version, /api, /apis and group versions from the answers kept online.
func (p *Proxy) discovery(w http.ResponseWriter, r *http.Request, req *Request) {
	if r.Method != http.MethodGet || !cache.IsDiscovery(r.URL.Path) {
		p.unavailable(w, req)
		return
	}
	forms := append(append([]wire.MediaType(nil), req.Accept...), wire.MediaType{Type: wire.MediaJSON})
	for _, m := range forms {
		if m.Type == "*/*" {
			m = wire.MediaType{Type: wire.MediaJSON}
		}
		ct, body, err := p.Store.GetDiscovery(r.URL.Path, m.String())
		if err == nil {
			writeBody(w, http.StatusOK, ct, body)
			return
		}
	}
	p.status(w, req, http.StatusServiceUnavailable, "nodehub: the cloud is unreachable and "+r.URL.Path+" was never cached")
}

// CanAnswer reports whether the cache holds an answer to a get or list (a watch-list's initial
// events too). The hub asks it when the cloud is slow to answer, to decide whether to stop waiting.
func (p *Proxy) CanAnswer(r *http.Request, req *Request) bool {
	p.resolve(r, req)
	switch req.Info.Verb {
	case wire.VerbGet:
		_, _, err := p.lookup(req)
		return err == nil
	case wire.VerbList, wire.VerbWatch:
		if req.Info.Verb == wire.VerbWatch && !req.Info.SendInitialEvents || req.Info.ShardSelector != "" {
			return false
		}
		pl, err := p.planList(req)
		return err == nil && pl != nil
	}
	return false
}
