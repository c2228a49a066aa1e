// Package serve is the request pipeline: every request a node client or a pod sends to the hub's
// proxy ports goes through it, from its arrival to its answer (Pipeline.ServeHTTP lists the
// steps; each is one method, in proxy.go and forward.go; what they learn is one proxyRequest,
// request.go). It is built once with the hub's parts it asks (Deps) and knows nothing of the
// hub's listeners, lifecycle, GC or OTA: package hub assembles it and hands it the proxy ports'
// requests.
package serve

import (
	"context"
	"log/slog"
	"net/http/httputil"
	"sync/atomic"
	"time"

	"nodehub/cache"
	"nodehub/filter"
	"nodehub/hub/autonomy"
	"nodehub/hub/endpointfix"
	"nodehub/hub/identity"
	"nodehub/hub/local"
	"nodehub/hub/nodelease"
	"nodehub/hub/remote"
	"nodehub/hub/tokens"
	"nodehub/hub/topology"
	"nodehub/pool"
	"nodehub/wire"
)

// Pipeline is the request pipeline: it serves every request on the proxy ports (ServeHTTP, the
// plain port; ServeBearer, the secure port) through the steps ServeHTTP lists.
type Pipeline struct {
	Deps
	proxy *httputil.ReverseProxy // the forward step's (forward.go)
	node  nodeCopy               // the node as a live watch of it keeps it (nodecopy.go)
	// Short requests being served, for MaxInFlight: the node's own clients' and everyone else's.
	inflightNode, inflightOthers atomic.Int64
}

// Deps are what the pipeline is built with: settings and the hub's parts. A part that is off is
// nil: Cache, Local, Auto and Fix without a cache; Pool without pool sharing.
type Deps struct {
	Log           *slog.Logger
	NodeName      string
	Creds         interface{ Err() error } // the node's credentials: the node's requests wait for them
	MaxInFlight   int                      // per budget; 0: no bound
	BodyTimeout   time.Duration            // a request body's deadline; 0: DefaultBodyTimeout
	HeaderTimeout time.Duration            // how long a read the cache can answer waits for the cloud's headers

	Cloud    Cloud            // whether the cloud is reachable (the one source)
	Balancer *remote.Balancer // the cloud servers the forward step sends to
	Lease    *nodelease.Lease // the node's Lease, answered from the hub's copy
	Metrics  Metrics
	Cache    *cache.Manager // where cloud answers are kept (Keep)
	Local    *local.Proxy   // the offline answers
	Filters  *filter.Set
	Topo     *topology.Source    // servicetopology's data
	Pool     *pool.Pool          // the shared stores
	IDs      *identity.Table     // whose cache a credential reads and fills
	Tokens   *tokens.Store       // the tokens kept for offline token requests
	Auto     *autonomy.Condition // set on kubelet's GET of its node
	Fix      *endpointfix.Fixer  // the node's endpoint corrections
}

// Cloud is the cloud state the pipeline asks (the hub's one source of "online").
type Cloud interface {
	Online() bool                            // the cloud is reachable
	Current() remote.State                   // the verdict now (Unknown before the first)
	Settle(ctx context.Context) remote.State // the verdict, after a moment's wait for the first
	OnlinePeriod() context.Context           // ends when the cloud turns unreachable
}

// Metrics are the pipeline's counts (the hub's /metrics).
type Metrics interface {
	Inflight(ri *wire.RequestInfo, delta float64)
	Request(ri *wire.RequestInfo, code int, d time.Duration)
	Unauthorized(port string)
	Throttled(budget string)
	Offline(verb string)
	FilterError(filter string)
	FilterAction(filter, action string)
	NodeFromWatch()
	CloudBytes(ri *wire.RequestInfo) func(n int)   // a proxied answer's bytes
	Purpose(purpose, direction string) func(n int) // cloud bytes by purpose
	PoolServed(verb, resource string)              // a list or watch the shared stores answered
	PoolWatches(delta int)                         // watches the shared stores serve
}

// DefaultBodyTimeout bounds the time a client takes to send a request body on the proxy ports
// (Deps.BodyTimeout): a body that trickles in does not hold an in-flight slot for longer.
const DefaultBodyTimeout = 10 * time.Second

// New builds the pipeline from its dependencies.
func New(d Deps) *Pipeline {
	p := &Pipeline{Deps: d}
	p.proxy = p.newReverseProxy()
	return p
}

// CurrentNode is the node as the cloud last sent it, while the pipeline's copy of it is fresh
// (nodecopy.go), else nil.
func (p *Pipeline) CurrentNode() []byte { return p.node.fresh(time.Now(), p.Cloud.Online()) }

// InFlight are the short requests being served now: the node's own clients' and everyone else's.
func (p *Pipeline) InFlight() (node, others int64) {
	return p.inflightNode.Load(), p.inflightOthers.Load()
}
