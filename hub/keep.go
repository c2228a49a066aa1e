package hub

import (
	"io"
	"net/http"

	"nodehub/wire"
)

// keep tees a cloud answer into owner's cache as it streams to its reader: a resource's answer
// as the cache's policy says (cache.Manager.Tee), a discovery document by its path; nothing
// without a cache. It is where every cache write of a cloud answer starts: the proxy's answers
// (respond), the pool's shared stores (poolTee) and the hub's own readers (ownFetch). The
// writer queue coalesces and writes asynchronously: the reader never waits on the disk.
func (s *Server) keep(ri *wire.RequestInfo, owner string, resp *http.Response) {
	if s.cache == nil {
		return
	}
	var tee io.ReadCloser
	switch {
	case ri.IsResource:
		tee = s.cache.Tee(ri, owner, resp)
	case ri.Verb == wire.VerbGet:
		tee = s.cache.TeeDiscovery(resp.Request.URL.Path, resp)
	}
	if tee != nil {
		resp.Body = tee
	}
}
