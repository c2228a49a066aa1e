// Package hub is nodehub put together: the Server (server.go: assembly, New and its steps in
// assemble.go; lifecycle, Run) with the servers (the proxy ports node clients and pods talk to,
// the hub's own endpoints, the pool port) and the parts it composes — the remote backends and
// their health, the node lease, the cache and the offline proxy, identity, tokens, autonomy, the
// pool, the topology source — and the request pipeline (hub/serve), which the Server builds,
// holds and hands the proxy ports' requests; it serves them. Config (config.go) is its contract
// with main; docs/ARCHITECTURE.md is the map.
package hub

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"nodehub/cache"
	"nodehub/filter"
	"nodehub/hub/autonomy"
	"nodehub/hub/endpointfix"
	"nodehub/hub/identity"
	"nodehub/hub/local"
	"nodehub/hub/metrics"
	"nodehub/hub/nodelease"
	"nodehub/hub/ota"
	"nodehub/hub/remote"
	"nodehub/hub/serve"
	"nodehub/hub/tokens"
	"nodehub/hub/topology"
	"nodehub/node/dummyif"
	"nodehub/pool"
)

// Server is a running hub. Build it with New, start it with Run.
type Server struct {
	cfg      Config
	log      *slog.Logger
	balancer *remote.Balancer
	checker  *remote.Checker
	lease    *nodelease.Lease
	pipe     *serve.Pipeline // serves the proxy ports (hub/serve)
	metrics  *hubMetrics
	cache    *cache.Manager
	local    *local.Proxy
	state    *cloudState
	filters  *filter.Set
	topo     *topology.Source
	ids      *identity.Table // tokens the cloud accepted, by ServiceAccount
	dummy    *dummyif.Link   // nil without --enable-dummy-if
	ota      *ota.Handler
	pool     *pool.Pool // nil when pool sharing is off
	pm       *poolMetrics

	tokens *tokens.Store       // ServiceAccount tokens the cloud issued, for offline token requests
	auto   *autonomy.Condition // the node's Autonomy condition; nil without a cache
	fix    *endpointfix.Fixer  // the node's endpoints as kubelet reports them; nil without a cache

	mu        sync.Mutex
	listeners []net.Listener // the plain ports' bound listeners (proxy first), for tests: addrs_test.go
	secure    []net.Addr     // the secure ports' bound addresses, for tests

	beforeCacheClose func() // a test's look at the hub as Run closes the cache
}

// New checks the configuration and prepares the servers; nothing listens until Run. The parts
// are built in this order, each from those before it (assemble.go).
func New(cfg Config) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Log}
	s.ids = identity.Open(cfg.RootDir, cfg.Log)
	var err error
	if s.tokens, err = openTokens(cfg); err != nil {
		return nil, err
	}
	reg := metrics.NewRegistry()
	s.metrics = newHubMetrics(reg)
	s.metrics.watchCerts(cfg.Credentials.GetClientCertificate, cfg.ServingCert)
	if err := s.newCloud(); err != nil {
		return nil, err
	}
	if err := s.openCache(); err != nil {
		return nil, err
	}
	if err := s.newFilters(); err != nil {
		return nil, err
	}
	if d := cfg.DummyIf; d.Enabled {
		s.dummy = &dummyif.Link{Name: d.Name, IP: d.IP, Log: cfg.Log, OnEnsure: s.metrics.dummyEnsured}
	}
	s.ota = s.newOTA()
	s.pm = newPoolMetrics(reg)
	if s.pool, err = s.newPool(); err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	if s.pool != nil {
		s.pm.watchStores(reg, s.pool)
	}
	s.pipe = s.newPipeline()
	if s.auto != nil {
		s.auto.Current = s.pipe.CurrentNode // evaluated when kubelet reads nothing of its node
	}
	return s, nil
}

// Bounds on what a client may send, on every port the hub serves.
const (
	// MaxHeaderBytes bounds a request's line and headers (a 1 MB User-Agent gets 431). Kubernetes
	// clients send a few KiB at most: a ServiceAccount token is about 1 KiB.
	MaxHeaderBytes = 32 << 10
	// ReadHeaderTimeout bounds the time a client takes to send its request line and headers.
	ReadHeaderTimeout = 10 * time.Second
)

// boundConns applies MaxConnsPerHost and MaxConns to a port's listener (loopback clients exempt
// when loopbackFree: the node's own), counting what it refuses.
func (s *Server) boundConns(ln net.Listener, port string, loopbackFree bool) net.Listener {
	return limitConns(ln, loopbackFree, func() { s.metrics.refusedConns.Inc(port) })
}

// newHTTPServer is the http.Server every port of the hub uses (proxy, hub API, secure, pool): bounded
// headers, a deadline on them, idle connections closed, the hub's lifetime as base context.
func (s *Server) newHTTPServer(ctx context.Context, h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		MaxHeaderBytes:    MaxHeaderBytes,
		ReadHeaderTimeout: ReadHeaderTimeout,
		IdleTimeout:       90 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
}

// started calls Config.Started once the shared stores hold their first lists (the start-up burst
// is over), or after startedWithin, or not at all when ctx ends first.
func (s *Server) started(ctx context.Context) {
	t := time.NewTimer(startedWithin)
	defer t.Stop()
	if s.pool != nil {
		for _, st := range s.pool.Stores() {
			select {
			case <-st.FirstSynced():
			case <-t.C:
				s.cfg.Started()
				return
			case <-ctx.Done():
				return
			}
		}
	}
	s.cfg.Started()
}

// suspectAfter is how long a forwarded request waits for its answer before the server is reached
// at once (see remote.Balancer.SuspectAfter): with a reach's 1.5 s floor, a black-holed link is
// noticed ~1.8 s after a client's first request into it (goal: a client restarted into an outage
// served within 2 s). A slow answer costs a reach (a resumed handshake, rate-limited), never a verdict.
const suspectAfter = 300 * time.Millisecond

// startedWithin bounds the start-up phase Config.Started ends.
const startedWithin = 2 * time.Minute
