package local

import (
	"errors"
	"net/http"

	"nodehub/cache"
	"nodehub/wire"
)

// Revisions are changes to what a request is served that do not come from the cache: the hub's
// corrections of this node's endpoints (hub/endpointfix), which follow kubelet's reports while
// the cloud cannot.
type Revisions interface {
	// Served returns the revision of the moment for the objects an answer sends now, and takes it
	// as sent; nil when it changes nothing.
	Served() func(raw []byte) []byte
	// Pass begins a pass of a watch over the objects it serves: fn returns an object as served
	// now and whether that differs from what the watch sent before (it goes as MODIFIED); next
	// is closed at the next revision. fn is nil when nothing can have changed.
	Pass() (fn func(raw []byte) ([]byte, bool), next <-chan struct{})
}

// revisions returns the request's revisions, or nil.
func (p *Proxy) revisions(ri *wire.RequestInfo) Revisions {
	if p.Revisions == nil {
		return nil
	}
	return p.Revisions(ri)
}

// served returns the rewrite of an answer's objects, or nil.
func (p *Proxy) served(ri *wire.RequestInfo) func([]byte) []byte {
	if rv := p.revisions(ri); rv != nil {
		return rv.Served()
	}
	return nil
}

// rewritten is raw through fn (nil: raw).
func rewritten(fn func([]byte) []byte, raw []byte) []byte {
	if fn == nil {
		return raw
	}
	return fn(raw)
}

// revise sends, as MODIFIED, every object of the watch's list that a revision changed since the
// watch's last pass; it returns the channel of the next revision, and false when the client is
// gone.
func (p *Proxy) revise(r *http.Request, req *Request, pl *listPlan, rev Revisions, protobuf bool, send func(typ string, obj []byte) bool) (<-chan struct{}, bool) {
	fn, next := rev.Pass()
	if fn == nil {
		return next, true
	}
	release, ok := p.acquire(r, req)
	if !ok {
		return next, false
	}
	defer release()
	gone := errors.New("local: watch client gone")
	_, err := p.each(pl, func(it cache.Item) error {
		out, moved := fn(it.Body)
		if !moved {
			return nil
		}
		obj, err := wire.Convert(out, protobuf)
		if err != nil {
			return nil
		}
		if !send(wire.EventModified, obj) {
			return gone
		}
		return nil
	})
	return next, !errors.Is(err, gone)
}
