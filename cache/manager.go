package cache

import (
	"io"
	"net/http"
	"slices"
	"strings"

	"nodehub/wire"
)

// DefaultAgents are the components whose reads are cached by default (YurtHub's list, and the
// hub's own requests), comma separated as --cache-agents takes them.
const DefaultAgents = "kubelet,kube-proxy,flanneld,coredns,raven-agent-ds,yurt-node-servant," + SelfComponent

// SelfComponent is the hub's own component (its topology informer, the pool's shared stores). It
// is cached whatever --cache-agents lists: the hub needs that data to answer offline.
const SelfComponent = "nodehub"

// neverCached are resources whose answers are per-request decisions or credentials, not state.
var neverCached = map[string]bool{
	"certificatesigningrequests": true, "subjectaccessreviews": true, "selfsubjectaccessreviews": true,
	"localsubjectaccessreviews": true, "selfsubjectrulesreviews": true, "tokenreviews": true,
	"selfsubjectreviews": true,
}

// Policy decides what is cached.
type Policy struct {
	// Agents are the components cached; "*" means all.
	Agents []string
	// Excluded components are never cached, whatever Agents says (calico's IPAM blocks must never
	// be served stale).
	Excluded []string
	// Shared are resources ("group/resource", the core group empty) cached for every component,
	// whatever Agents says (Excluded still wins): the pool-scope resources, which every client of
	// the node (a pod with its own ServiceAccount too) needs offline.
	Shared []string
}

// Caches reports whether a response to this request would be cached, and as what kind of stream.
func (p Policy) Caches(ri *wire.RequestInfo) (kind int, ok bool) {
	if !ri.IsResource || ri.Component == "" || slices.Contains(p.Excluded, ri.Component) {
		return 0, false
	}
	if !slices.Contains(p.Agents, "*") && !slices.Contains(p.Agents, ri.Component) && ri.Component != SelfComponent && !slices.Contains(p.Shared, ri.Group+"/"+ri.Resource) {
		return 0, false
	}
	if neverCached[ri.Resource] || (ri.Subresource != "" && ri.Subresource != "status") {
		return 0, false
	}
	if ri.Resource == "secrets" && ri.Component != "kubelet" {
		return 0, false
	}
	if ri.Accept.As != "" { // Table or PartialObjectMetadata: not the objects themselves
		return 0, false
	}
	switch ri.Verb {
	case wire.VerbGet, wire.VerbCreate, wire.VerbUpdate, wire.VerbPatch:
		return StreamObject, true
	case wire.VerbList:
		return StreamList, true
	case wire.VerbWatch:
		return StreamWatch, true
	}
	return 0, false
}

// Manager connects responses to the cache: it decides what is cached and tees it into the Writer.
type Manager struct {
	Policy Policy
	Store  *Store
	Writer *Writer
}

// Tee returns a body that passes resp's body through unchanged while handing a copy to the cache,
// or nil when the response is not cached (or, held whole, is what the cache holds already:
// teeskip.go). owner names whose cache it goes to.
func (m *Manager) Tee(ri *wire.RequestInfo, owner string, resp *http.Response) io.ReadCloser {
	kind, ok := m.Policy.Caches(ri)
	if !ok || resp.StatusCode/100 != 2 {
		return nil
	}
	media := wire.ParseMediaType(resp.Header.Get("Content-Type"))
	if media.Type != wire.MediaJSON && media.Type != wire.MediaProtobuf {
		return nil
	}
	enc := strings.ToLower(resp.Header.Get("Content-Encoding"))
	if enc != "" && enc != "identity" && enc != "gzip" || enc == "gzip" && kind == StreamWatch {
		return nil
	}
	if kind == StreamList && ri.ResourceVersionMatch == "Exact" {
		return nil // a historical list: not what the cluster holds now, so neither cached nor reconciled
	}
	r := Resource{Owner: owner, Group: ri.Group, Version: ri.Version, Resource: ri.Resource}
	if r.validate() != nil {
		return nil
	}
	ns := ri.Namespace
	if ri.Resource == "namespaces" {
		ns = ""
	}
	sel, err := wire.NewSelector(ns, ri.LabelSelector, ri.FieldSelector)
	if err != nil {
		return nil
	}
	// A page, or one shard of the collection (shardSelector), is a part of the list: its items
	// are kept, but it is never recorded as the whole list its selectors name.
	part := ri.Continue != "" || ri.ShardSelector != ""
	if w, ok := resp.Body.(*wire.Whole); ok && enc == "" && w.Len() == len(w.Bytes()) && m.holds(r, kind, sel, part, w.Bytes()) {
		return nil // nothing the writer would write (teeskip.go)
	}
	st := &Stream{w: m.Writer, r: r, kind: kind, media: media, gzip: enc == "gzip", sel: sel, page: part,
		watchList: kind == StreamWatch && ri.SendInitialEvents && !part}
	return newTeeBody(resp.Body, st)
}

// teeBody reads the cloud's body for the client and copies what it read into a Stream. A body
// held whole (wire.Whole: a get or list the filters rewrote) is handed to the Stream as it is, at
// the first read, instead of copied piece by piece: its bytes never change.
type teeBody struct {
	rc    io.ReadCloser
	st    *Stream
	whole *wire.Whole // the body, when held whole and not yet handed on
	given bool        // the whole body went to the Stream: reads copy nothing
	ended bool
}

func newTeeBody(rc io.ReadCloser, st *Stream) *teeBody {
	t := &teeBody{rc: rc, st: st}
	if w, ok := rc.(*wire.Whole); ok && w.Len() == len(w.Bytes()) {
		t.whole = w
	}
	return t
}

func (t *teeBody) Read(p []byte) (int, error) {
	if t.whole != nil {
		t.st.keep(t.whole.Bytes())
		t.whole, t.given = nil, true
	}
	n, err := t.rc.Read(p)
	if n > 0 && !t.given {
		t.st.Write(p[:n])
	}
	if err != nil && !t.ended {
		t.ended = true
		t.st.End(err == io.EOF)
	}
	return n, err
}

func (t *teeBody) Close() error {
	if !t.ended {
		t.ended = true
		t.st.End(false)
	}
	return t.rc.Close()
}

// discoveryResource is the queue discovery answers are written through (it names no directory).
var discoveryResource = Resource{Owner: "discovery", Version: "v1", Resource: "discovery"}

// IsDiscovery reports whether a path is one of the discovery answers kept for offline use.
func IsDiscovery(path string) bool {
	switch {
	case path == "/version" || path == "/api" || path == "/apis" || path == "/api/v1":
		return true
	case strings.HasPrefix(path, "/apis/"):
		return strings.Count(strings.Trim(path, "/"), "/") <= 2 // /apis/<group> and /apis/<group>/<version>
	}
	return false
}

// TeeDiscovery keeps a copy of a discovery answer, under the form (media type with parameters)
// the cloud answered in.
func (m *Manager) TeeDiscovery(path string, resp *http.Response) io.ReadCloser {
	if resp.StatusCode != http.StatusOK || !IsDiscovery(path) || resp.Header.Get("Content-Encoding") != "" {
		return nil
	}
	ct := resp.Header.Get("Content-Type")
	st := &Stream{w: m.Writer, r: discoveryResource, kind: StreamDiscovery, discoveryPath: path, discoveryType: ct}
	return newTeeBody(resp.Body, st)
}
