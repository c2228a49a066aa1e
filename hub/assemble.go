package hub

import (
	"context"
	"fmt"

	"nodehub/cache"
	"nodehub/filter"
	"nodehub/hub/autonomy"
	"nodehub/hub/local"
	"nodehub/hub/nodelease"
	"nodehub/hub/remote"
	"nodehub/hub/serve"
	"nodehub/hub/topology"
)

// New's steps (server.go), each building one group of parts from the configuration and the parts
// built before it.

// newCloud builds the cloud's side: the servers (backends) and the balancer, the cloud state that
// follows their verdicts, the node's Lease, and the health checker whose probe is the Lease's
// heartbeat.
func (s *Server) newCloud() error {
	cfg := s.cfg
	backends := make([]*remote.Backend, 0, len(cfg.Servers))
	for _, addr := range cfg.Servers {
		b, err := remote.NewBackend(addr, cfg.Credentials, cfg.HeartbeatTimeout)
		if err != nil {
			return fmt.Errorf("hub: server %q: %w", addr, err)
		}
		backends = append(backends, b)
	}
	s.balancer = &remote.Balancer{Mode: cfg.LBMode, Backends: backends, OnRequest: s.metrics.upstream, SuspectAfter: suspectAfter}
	s.state = newCloudState(s.balancer)
	s.lease = nodelease.New(cfg.NodeName, cfg.KubeletGracePeriod, cfg.Log)
	s.lease.Renewals = func(r string) { s.metrics.leaseRenewals.Inc(r) }
	s.checker = &remote.Checker{
		Probe: func(ctx context.Context, b *remote.Backend) error {
			return s.lease.Heartbeat(ctx, serverAsNode{b, s.metrics})
		},
		Interval:         cfg.HeartbeatInterval,
		Timeout:          cfg.HeartbeatTimeout,
		FailedRetry:      cfg.HeartbeatFailed,
		HealthyThreshold: cfg.HeartbeatHealthy,
		OnReach:          s.metrics.reach,
		OnChange: func(b *remote.Backend, st remote.State) {
			s.metrics.serverHealth(b, st == remote.Healthy)
			if s.state.update() {
				s.log.Info("cloud reachability changed", "online", s.state.Online())
			}
		},
		Log: cfg.Log,
	}
	return nil
}

// openCache opens the cache (with --cache-dir) and what needs it: its writer, the Autonomy
// condition, the offline proxy and the endpoint corrections.
func (s *Server) openCache() error {
	cfg := s.cfg
	if cfg.CacheDir == "" {
		return nil
	}
	store, err := cache.Open(cfg.CacheDir, cfg.Log)
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	store.SetMaxBytes(cfg.CacheMaxBytes)
	w := cache.NewWriter(store, cache.DefaultQueueBytes, cfg.Log)
	w.Delay = cfg.CacheSyncInterval
	w.MaxBytes = cfg.CacheMaxBytes
	w.OnFull = func(r cache.Resource) { s.metrics.cacheFull.Inc(r.Resource) }
	w.OnDrop = func(r cache.Resource) { s.metrics.cacheDropped.Inc(r.Resource) }
	s.auto = &autonomy.Condition{Write: s.writeAutonomy, Online: s.state.Online, Log: cfg.Log, FilesWritten: func() int64 { return store.Stats().FilesWritten }}
	w.OnError = func(r cache.Resource, err error) {
		s.metrics.cacheErrors.Inc(r.Resource)
		s.auto.CacheError(err)
	}
	policy := cfg.CachePolicy
	policy.Shared = sharedResources(cfg.Pool.Resources)
	s.cache = &cache.Manager{Policy: policy, Store: store, Writer: w}
	s.metrics.watchCache(s.cache)
	s.local = &local.Proxy{Store: store, NodeName: cfg.NodeName, Online: s.state.Online, Changed: s.state.Changed, Tokens: s.tokens, TokenServed: s.ids.Vouch, Log: cfg.Log,
		KubeletNode: s.auto.Node}
	s.newFixer()
	return nil
}

// newFilters builds the topology source and the filters that read it.
func (s *Server) newFilters() error {
	s.topo = topology.New(s.cfg.NodePoolName, s.ownFetch("topology"), s.log)
	s.topo.Returned = s.state.Returned
	s.topo.Services = s.sharedServices
	fc := s.cfg.Filters
	fc.Topology = s.topo
	fs, err := filter.New(fc)
	if err != nil {
		return fmt.Errorf("hub: filters: %w", err)
	}
	s.filters = fs
	return nil
}

// newPipeline builds the request pipeline (hub/serve) from the parts it asks.
func (s *Server) newPipeline() *serve.Pipeline {
	cfg := s.cfg
	return serve.New(serve.Deps{
		Log: s.log, NodeName: cfg.NodeName, Creds: cfg.Credentials,
		MaxInFlight: cfg.MaxInFlight, BodyTimeout: cfg.BodyTimeout, HeaderTimeout: cfg.HeartbeatTimeout,
		Cloud: s.state, Balancer: s.balancer, Lease: s.lease, Metrics: pipeMetrics{s.metrics, s.pm},
		Cache: s.cache, Local: s.local, Filters: s.filters, Topo: s.topo, Pool: s.pool,
		IDs: s.ids, Tokens: s.tokens, Auto: s.auto, Fix: s.fix,
	})
}
