package serve

import (
	"context"
	"net/http"
	"time"

	"nodehub/filter"
	"nodehub/hub/identity"
	"nodehub/hub/local"
	"nodehub/hub/remote"
	"nodehub/pool"
	"nodehub/wire"
)

// proxyRequest is one request on a proxy port from its arrival to its answer: what each step of
// the pipeline (proxy.go) learns, and the next ones read. accept makes it; every later field is
// written by the one step its comment names, and not changed after. It reaches the
// ReverseProxy's hooks (forward.go) as the one value the hub puts in the forwarded request's
// context.
type proxyRequest struct {
	// accept
	w       *recorder     // the client's ResponseWriter, remembering the status sent
	r       *http.Request // as the client sent it; its context is the client's
	ri      *wire.RequestInfo
	start   time.Time
	from    origin             // where it comes from: the node's own request or not (origin.go)
	ctx     context.Context    // the request's lifetime: the client's, cut by cancel
	cancel  context.CancelFunc // going offline (forward) or a topology change (chain) ends it
	cleanup []func()           // run when the request ends

	// admit
	body *timedBody // the request body under its deadline, nil without one

	// identify
	id    remote.Identity     // forwarded with the node's identity, or its own credential
	cred  identity.Credential // the request's own credential (zero for the node's identity)
	local *local.Request      // the offline proxy's view: whose cache it reads and fills; nil without a cache

	// route
	store *pool.Store // the shared store that answers it (routePool)

	// chain
	chain *filter.Chain // the filters its answer goes through; nil: none

	// forward
	route  remote.Route // how the balancer sends it
	kept   []byte       // the body of a write the offline proxy can answer (writefallback.go)
	caller string       // set for a token request whose answer is kept (tokens.go)
}

type requestKey struct{}

// requestOf returns the proxied request a forwarded request's context carries, or nil.
func requestOf(ctx context.Context) *proxyRequest {
	q, _ := ctx.Value(requestKey{}).(*proxyRequest)
	return q
}

// onEnd runs f when the request ends.
func (q *proxyRequest) onEnd(f func()) { q.cleanup = append(q.cleanup, f) }

// recorder remembers the status code; Unwrap lets http.ResponseController reach Flush and Hijack.
type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(p)
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) code() int {
	if r.status == 0 {
		return http.StatusOK
	}
	return r.status
}
