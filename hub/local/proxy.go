// Package local answers API requests from the cache while the cloud is unreachable, per verb, in
// the client's content type: reads from the files, the node's own status writes applied to the
// cached copies, events kept, everything else refused with a Status that says why.
package local

import (
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"nodehub/cache"
	"nodehub/hub/tokens"
	"nodehub/pool"
	"nodehub/wire"
)

// Proxy is the offline proxy. Zero values of the optional fields work.
type Proxy struct {
	// Store is the cache it answers from.
	Store *cache.Store
	// NodeName is this node: its Node, Lease and pods are the objects it may change offline.
	NodeName string
	// Tokens are the ServiceAccount tokens the cloud issued, for offline token requests; nil: none
	// kept (the node's clients get stand-ins).
	Tokens *tokens.Store
	// KubeletNode, if set, rewrites this node's Node as kubelet's get of it is answered (the hub
	// keeps the Autonomy condition there); it returns raw itself when nothing changes.
	KubeletNode func(raw []byte) []byte
	// TokenServed, if set, is told each token the cloud issued that is handed out offline.
	TokenServed func(token string)
	// Online reports whether the cloud is reachable; Changed returns a channel closed at the next
	// change of that state. An offline watch ends as soon as the cloud is back.
	Online  func() bool
	Changed func() <-chan struct{}
	// BookmarkInterval is how often an offline watch sends a BOOKMARK when the client allows them.
	// Default 5s.
	BookmarkInterval time.Duration
	// WatchTimeout ends an offline watch that gave no timeoutSeconds. Default 5 minutes.
	WatchTimeout time.Duration
	Log          *slog.Logger
	// MaxStreams bounds the offline lists (and watches' initial events) read from the cache at
	// once for clients with credentials of their own (pods): each holds an object or two in
	// memory while its client reads, so a pod's many lists of big objects cannot take the node's
	// memory. The node's own clients are not held back by them. Default 2.
	MaxStreams int
	// WriteTimeout bounds each write of a streamed offline answer (list, watch): a client that
	// stops reading loses its answer instead of holding a stream slot, and an object, for ever.
	// Default DefaultWriteTimeout (30 s).
	WriteTimeout time.Duration

	// Revisions, if set, returns the revisions of what a request is served that do not come from
	// the cache (the hub's corrections of this node's endpoints), or nil; Applied, if set, is told
	// each change applied offline (the object as now cached).
	Revisions func(ri *wire.RequestInfo) pool.Revisions
	Applied   func(ri *wire.RequestInfo, obj []byte)

	slotsOnce sync.Once
	slots     chan struct{}

	gatherOnce sync.Once
	gathering  chan struct{} // the lists held whole at once (gather.go)

	changeMu sync.Mutex
	changed  chan struct{} // closed at the next change applied offline (follow.go)
}

// acquire waits for a stream slot for a client that is not the node (the node's own need none);
// it returns the release, or false when the client went away first.
func (p *Proxy) acquire(r *http.Request, req *Request) (func(), bool) {
	if req.Shared {
		return func() {}, true
	}
	p.slotsOnce.Do(func() {
		n := p.MaxStreams
		if n <= 0 {
			n = 2
		}
		p.slots = make(chan struct{}, n)
	})
	select {
	case p.slots <- struct{}{}:
		return func() { <-p.slots }, true
	case <-r.Context().Done():
		return nil, false
	}
}

// Request is one request as the hub routes it.
type Request struct {
	Info *wire.RequestInfo
	// Own is the request's own cache (see cache's owners).
	Own string
	// Shared is true for requests made with the node's identity: they may also read the other
	// node-identity caches (kubectl on the gateway reads what kubelet and kube-proxy cached). A
	// request with credentials of its own reads only its own cache.
	Shared bool
	// Vouched is true when the cloud accepted the request's credential (always for the node's
	// identity): offline, a credential the cloud never accepted creates nothing.
	Vouched bool

	// Owners are the caches this request reads, its own first; Accept is every media type the
	// client accepts, in its order of preference. Both are filled on first use.
	Owners []string
	Accept []wire.MediaType
	once   sync.Once
}

// resolve fills Owners and Accept, once (the hub may ask CanAnswer from a timer while it serves).
func (p *Proxy) resolve(r *http.Request, req *Request) {
	req.once.Do(func() { p.fill(r, req) })
}

func (p *Proxy) fill(r *http.Request, req *Request) {
	if req.Accept == nil {
		req.Accept = wire.AcceptList(r.Header.Get("Accept"))
	}
	if req.Owners != nil {
		return
	}
	req.Owners = []string{req.Own}
	if !req.Shared {
		return
	}
	seen := map[string]bool{req.Own: true}
	for _, o := range append([]string{"kubelet", "kube-proxy"}, p.Store.Owners()...) {
		if !seen[o] && !strings.Contains(o, "@") {
			seen[o] = true
			req.Owners = append(req.Owners, o)
		}
	}
}

// ServeHTTP answers one request from the cache.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request, req *Request) {
	p.resolve(r, req)
	ri := req.Info
	if !ri.IsResource {
		p.discovery(w, r, req)
		return
	}
	if ri.ShardSelector != "" && (ri.Verb == wire.VerbList || ri.Verb == wire.VerbWatch) {
		p.status(w, req, http.StatusServiceUnavailable, "nodehub: the cloud is unreachable and a list or watch of one shard (shardSelector) cannot be answered from the cache")
		return
	}
	if ri.ContentType.IsCBOR() && (ri.Verb == wire.VerbCreate || ri.Verb == wire.VerbUpdate) {
		// client-go preferring CBOR sends JSON from then on (its answer to a 415).
		p.status(w, req, http.StatusUnsupportedMediaType, "nodehub: the cloud is unreachable and a CBOR body cannot be kept offline: send JSON or protobuf")
		return
	}
	switch ri.Verb {
	case wire.VerbGet:
		p.get(w, req)
	case wire.VerbList:
		p.list(w, r, req)
	case wire.VerbWatch:
		p.watch(w, r, req)
	case wire.VerbCreate:
		if ri.Group == "" && ri.Resource == "serviceaccounts" && ri.Subresource == "token" {
			p.token(w, r, req)
			return
		}
		p.create(w, r, req)
	case wire.VerbUpdate, wire.VerbPatch:
		p.update(w, r, req)
	case wire.VerbDelete, wire.VerbDeleteCollection:
		p.status(w, req, http.StatusForbidden, fmt.Sprintf("nodehub: the cloud is unreachable; %s of %s is not allowed offline", ri.Verb, ri.Resource))
	default:
		p.unavailable(w, req)
	}
}

func (p *Proxy) log() *slog.Logger {
	if p.Log == nil {
		return slog.Default()
	}
	return p.Log
}

func (p *Proxy) status(w http.ResponseWriter, req *Request, code int, msg string) {
	wire.WriteStatus(w, req.Info.Accept, code, msg)
}

func (p *Proxy) unavailable(w http.ResponseWriter, req *Request) {
	p.status(w, req, http.StatusServiceUnavailable, fmt.Sprintf("nodehub: the cloud is unreachable and %s %s cannot be answered from the cache", req.Info.Verb, resourceName(req.Info)))
}

func resourceName(ri *wire.RequestInfo) string {
	if ri.Subresource != "" {
		return ri.Resource + "/" + ri.Subresource
	}
	return ri.Resource
}

func (p *Proxy) notFound(w http.ResponseWriter, req *Request) {
	ri := req.Info
	gr := ri.Resource
	if ri.Group != "" {
		gr += "." + ri.Group
	}
	msg := fmt.Sprintf("%s %q not found", gr, ri.Name)
	if ri.Name == "" {
		msg = fmt.Sprintf("nodehub: the cloud is unreachable and %s were never cached", gr)
	}
	p.status(w, req, http.StatusNotFound, msg)
}

// resource returns the cache resource of an owner for the request.
func resource(owner string, ri *wire.RequestInfo) cache.Resource {
	return cache.Resource{Owner: owner, Group: ri.Group, Version: ri.Version, Resource: ri.Resource}
}

// namespace is the request's namespace as the cache files it (namespaces are cluster-scoped).
func namespace(ri *wire.RequestInfo) string {
	if ri.Resource == "namespaces" {
		return ""
	}
	return ri.Namespace
}

// format is how a response is written.
type format struct {
	protobuf bool
	meta     bool // as=PartialObjectMetadata(List)
}

// contentType is the response's Content-Type.
func (f format) contentType(list bool) string {
	ct := wire.MediaJSON
	if f.protobuf {
		ct = wire.MediaProtobuf
	}
	if f.meta {
		as := "PartialObjectMetadata"
		if list {
			as += "List"
		}
		ct += ";as=" + as + ";g=meta.k8s.io;v=v1"
	}
	return ct
}

// choose picks the first format the client accepts that the cache can produce. Table is not
// produced: a client asking for it lists a plain fallback after it (as the apiserver requires).
func choose(accept []wire.MediaType) (format, bool) {
	for _, m := range accept {
		switch {
		case m.As == "Table":
			continue
		case m.As == "PartialObjectMetadata" || m.As == "PartialObjectMetadataList":
			return format{protobuf: m.IsProtobuf(), meta: true}, true
		case m.As != "":
			continue
		case m.Type == wire.MediaProtobuf:
			return format{protobuf: true}, true
		case m.Type == wire.MediaJSON || m.Type == "*/*" || m.Type == "application/*":
			return format{}, true
		}
	}
	return format{}, false
}

// accepts reports whether the client takes the given plain media type.
func accepts(accept []wire.MediaType, protobuf bool) bool {
	return slices.ContainsFunc(accept, func(m wire.MediaType) bool {
		return m.As == "" && (m.IsProtobuf() == protobuf && (m.Type == wire.MediaJSON || m.Type == wire.MediaProtobuf) || !protobuf && m.Type == "*/*")
	})
}

// encodeItem returns a cached object in the chosen format (converted when the cache holds the other
// one, or left as it is when the client also accepts that one).
func encodeItem(raw []byte, f format, accept []wire.MediaType) ([]byte, bool, error) {
	out, err := wire.Convert(raw, f.protobuf)
	if err == nil {
		return out, f.protobuf, nil
	}
	stored := len(raw) > 0 && raw[0] != '{'
	if accepts(accept, stored) {
		return raw, stored, nil
	}
	return nil, false, err
}

func writeBody(w http.ResponseWriter, code int, ct string, body []byte) {
	h := w.Header()
	h.Set("Content-Type", ct)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-cache, private")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
