package local

import (
	"errors"
	"net/http"

	"nodehub/cache"
	"nodehub/pool"
	"nodehub/wire"
)

// revisions returns the request's revisions, or nil.
func (p *Proxy) revisions(ri *wire.RequestInfo) pool.Revisions {
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
func (p *Proxy) revise(r *http.Request, req *Request, pl *listPlan, rev pool.Revisions, protobuf bool, send func(typ string, obj []byte) bool) (<-chan struct{}, bool) {
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
