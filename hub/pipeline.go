package hub

import (
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
)

// pipeline is the request pipeline: it serves every request on the proxy ports (ServeHTTP, the
// plain port; serveBearer, the secure port) through the steps proxy.go lists. It is built once,
// by New, with the hub's parts it asks (pipelineDeps); it knows nothing of the listeners, the
// lifecycle, GC or OTA, which are the Server's.
type pipeline struct {
	pipelineDeps
	proxy *httputil.ReverseProxy // the forward step's (forward.go)
	node  nodeCopy               // the node as a live watch of it keeps it (nodecopy.go)
	// Short requests being served, for MaxInFlight: the node's own clients' and everyone else's.
	inflightNode, inflightOthers atomic.Int64
}

// pipelineDeps are what the pipeline is built with: settings from Config and the hub's parts,
// each built by New. A part that is off is nil: cache, local, auto and fix without a cache; pool
// without pool sharing.
type pipelineDeps struct {
	log           *slog.Logger
	nodeName      string
	creds         Credentials   // the node's: the node's requests wait for them
	maxInFlight   int           // Config.MaxInFlight, per budget
	bodyTimeout   time.Duration // Config.BodyTimeout
	headerTimeout time.Duration // how long a read the cache can answer waits for the cloud's headers

	state    *cloudState      // whether the cloud is reachable (the one source)
	balancer *remote.Balancer // the cloud servers the forward step sends to
	lease    *nodelease.Lease // the node's Lease, answered from the hub's copy
	metrics  *hubMetrics
	pm       *poolMetrics
	cache    *cache.Manager // where cloud answers are kept (keep)
	local    *local.Proxy   // the offline answers
	filters  *filter.Set
	topo     *topology.Source    // servicetopology's data
	pool     *pool.Pool          // the shared stores
	ids      *identity.Table     // whose cache a credential reads and fills
	tokens   *tokens.Store       // the tokens kept for offline token requests
	auto     *autonomy.Condition // set on kubelet's GET of its node
	fix      *endpointfix.Fixer  // the node's endpoint corrections
}

// newPipeline builds the pipeline from its dependencies.
func newPipeline(d pipelineDeps) *pipeline {
	p := &pipeline{pipelineDeps: d}
	p.proxy = p.newReverseProxy()
	return p
}
