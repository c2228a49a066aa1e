package serve

import (
	"io"
	"net/http"

	"nodehub/cache"
	"nodehub/wire"
)

// Keep tees a cloud answer into owner's cache c as it streams to its reader: a resource's answer
// as the cache's policy says (cache.Manager.Tee), a discovery document by its path; nothing
// without a cache (c nil). It is where every cache write of a cloud answer starts: the proxy's
// answers (respond), the pool's shared stores (poolTee), the hub's own readers (ownFetch) and
// GC's re-list (relistNodePods). The writer queue coalesces and writes asynchronously: the
// reader never waits on the disk.
func Keep(c *cache.Manager, ri *wire.RequestInfo, owner string, resp *http.Response) {
	if c == nil {
		return
	}
	var tee io.ReadCloser
	switch {
	case ri.IsResource:
		tee = c.Tee(ri, owner, resp)
	case ri.Verb == wire.VerbGet:
		tee = c.TeeDiscovery(resp.Request.URL.Path, resp)
	}
	if tee != nil {
		resp.Body = tee
	}
}
