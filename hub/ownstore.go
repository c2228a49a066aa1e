package hub

import (
	"context"
	"net/http"
	"net/url"

	"nodehub/hub/remote"
	"nodehub/hub/topology"
	"nodehub/pool"
	"nodehub/wire"
)

// fromStore answers one of the hub's own lists of a pool-scope resource from the shared store,
// as the node's clients are answered: the store already holds what the cloud (or the pool's
// leader) sent, so the hub reads nothing twice — at start, and after an outage, when the reader
// lists again. Its watches go to the cloud (from the store's resourceVersion). (The topology
// source does not come here while a store holds the services: it follows the store,
// sharedServices.)
func fromStore(req *http.Request, ri *wire.RequestInfo, st *pool.Store) *http.Response {
	rec := &recordedResponse{header: http.Header{}, code: http.StatusOK}
	st.ServeList(rec, pool.Serving{Info: ri})
	return rec.response(req)
}

// sharedServices offers the topology source (topology.Source.Services) the Services of the
// shared store when one holds them: it follows the store's objects and changes in memory — no
// list, no watch of the cloud of its own, nothing encoded or held whole — so a hub whose pool
// shares services holds one services watch (the store's), also on the link's return. While the
// store is reading its first list with the cloud reachable, it waits for it (storeWait), as
// ownFetch does. nil when no store holds the services: with --pool-scope-resources without
// services, offline before the store ever listed, or while the store is emptied past its bounds;
// the source then reads through ownFetch (the cloud, or offline the cache).
func (s *Server) sharedServices(ctx context.Context) topology.Follow {
	if s.pool == nil {
		return nil
	}
	ri, err := wire.ParseURL(http.MethodGet, &url.URL{Path: "/api/v1/services"})
	if err != nil {
		return nil
	}
	s.awaitFirstList(ctx, ri, func() bool { return s.state.verdict(ctx) == remote.Healthy })
	st := s.pool.Store(ri)
	if st == nil {
		return nil
	}
	return func(ctx context.Context, list func([][]byte), event func(wire.WatchEvent)) error {
		return st.Follow(ctx, pool.Follower{List: list, Event: func(typ string, raw []byte) {
			event(wire.WatchEvent{Type: typ, Object: raw})
		}})
	}
}
