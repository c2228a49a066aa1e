package hub

import (
	"net/http"

	"nodehub/pool"
	"nodehub/wire"
)

// fromStore answers one of the hub's own lists of a pool-scope resource (the topology source's
// services) from the shared store, as the node's clients are answered: the store already holds
// what the cloud (or the pool's leader) sent, so the hub reads nothing twice — at start, and
// after an outage, when the reader lists again. Its watches go to the cloud (from the store's
// resourceVersion).
func fromStore(req *http.Request, ri *wire.RequestInfo, st *pool.Store) *http.Response {
	rec := &recordedResponse{header: http.Header{}, code: http.StatusOK}
	st.ServeList(rec, pool.Serving{Info: ri})
	return rec.response(req)
}
