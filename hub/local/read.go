package local

import (
	"errors"
	"net/http"

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
	body, pb, err := encodeItem(it.Body, f, req.Accept)
	if err != nil {
		p.status(w, req, http.StatusNotAcceptable, "nodehub: "+err.Error())
		return
	}
	writeBody(w, http.StatusOK, format{protobuf: pb}.contentType(false), body)
}

// listed is a list read from one owner's cache.
type listed struct {
	items []cache.Item
	res   cache.ListResult
}

// readList reads the request's list from the first owner's cache that has ever seen it (a
// record of it, or any object of the resource).
func (p *Proxy) readList(req *Request) (*listed, error) {
	ri := req.Info
	sel, err := cache.NewSelector(namespace(ri), ri.LabelSelector, ri.FieldSelector)
	if err != nil {
		return nil, &statusError{http.StatusBadRequest, err.Error()}
	}
	for _, owner := range req.Owners {
		l := &listed{}
		res, err := p.Store.EachInList(resource(owner, ri), sel, func(it cache.Item) error {
			l.items = append(l.items, it)
			return nil
		})
		if err != nil {
			return nil, err
		}
		l.res = res
		if res.Record != nil || res.Count > 0 {
			return l, nil
		}
	}
	return nil, nil
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

// listOrAnswer reads the request's list, or answers 404 (or the error) and says false.
func (p *Proxy) listOrAnswer(w http.ResponseWriter, req *Request) (*listed, bool) {
	l, err := p.readList(req)
	if err == nil && l != nil {
		return l, true
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

func (p *Proxy) list(w http.ResponseWriter, req *Request) {
	ri := req.Info
	f, ok := choose(req.Accept)
	if !ok {
		p.status(w, req, http.StatusNotAcceptable, "nodehub: none of the accepted media types can be served offline")
		return
	}
	l, ok := p.listOrAnswer(w, req)
	if !ok {
		return
	}
	// An empty pod list makes kubelet kill the node's pods: never invent one where the cloud had pods.
	// Nor a partial one (an object unreadable, a write that failed): the missing pods would die.
	if ri.Component == "kubelet" && ri.Resource == "pods" && ri.Group == "" && (l.res.Partial || len(l.items) == 0 && l.res.Record != nil && len(l.res.Record.Keys) > 0) {
		p.status(w, req, http.StatusServiceUnavailable, "nodehub: the cloud is unreachable and this node's cached pods cannot be read")
		return
	}
	av, kind := "", ""
	if l.res.Record != nil {
		av, kind = l.res.Record.APIVersion, l.res.Record.Kind
	}
	if len(l.items) > 0 {
		av, kind = l.items[0].Header.APIVersion, l.items[0].Header.Kind
	}
	if f.meta {
		out := &metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadataList"},
			ListMeta: metav1.ListMeta{ResourceVersion: l.res.ResourceVersion}}
		for _, it := range l.items {
			pom, err := wire.PartialObjectMetadata(it.Body)
			if err != nil {
				continue
			}
			out.Items = append(out.Items, *pom)
		}
		body, err := wire.EncodeMeta(out, "PartialObjectMetadataList", f.protobuf)
		if err != nil {
			p.status(w, req, http.StatusInternalServerError, err.Error())
			return
		}
		writeBody(w, http.StatusOK, f.contentType(true), body)
		return
	}
	pb := f.protobuf
	if len(l.items) > 0 {
		if _, got, err := encodeItem(l.items[0].Body, f, req.Accept); err == nil {
			pb = got // every item of a resource is stored in one format
		}
	}
	b := &wire.ListBuilder{Protobuf: pb, APIVersion: av, Kind: kind}
	for _, it := range l.items {
		raw, err := wire.Convert(it.Body, pb)
		if err == nil {
			err = b.Add(raw)
		}
		if err != nil {
			p.log().Debug("offline list: item skipped", "name", it.Header.Name, "err", err)
		}
	}
	body, err := b.Bytes(l.res.ResourceVersion)
	if err != nil {
		p.status(w, req, http.StatusInternalServerError, err.Error())
		return
	}
	writeBody(w, http.StatusOK, format{protobuf: pb}.contentType(false), body)
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

// CanAnswer reports whether the cache holds an answer to a get or list. The hub asks it when the
// cloud is slow to answer, to decide whether to stop waiting.
func (p *Proxy) CanAnswer(r *http.Request, req *Request) bool {
	p.resolve(r, req)
	switch req.Info.Verb {
	case wire.VerbGet:
		_, _, err := p.lookup(req)
		return err == nil
	case wire.VerbList:
		l, err := p.readList(req)
		return err == nil && l != nil
	}
	return false
}
