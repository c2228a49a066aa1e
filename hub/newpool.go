package hub

import (
	"context"
	"net/http"
	"nodehub/cache"
	"time"

	"nodehub/hub/serve"
	"nodehub/pool"
	"nodehub/wire"
)

// PoolConfig is the pool-sharing part of Config.
type PoolConfig struct {
	// Resources are the pool-scope resources (--pool-scope-resources); none turns sharing off.
	Resources []pool.Resource
	// Mode is pool.ModeOff (node level only), ModeLease or ModeNodePool (default pool.ModeOff).
	Mode string
	// LeaseNamespace holds the node Leases the lease-mode election reads (default
	// kube-node-lease).
	LeaseNamespace string
	// Addr is host:port of the pool port (--pool-bind-address:--pool-port); required unless Mode
	// is off.
	Addr string
	// LeaderTimeout: a follower gives up a silent or unreachable leader after this long (default 5s).
	// The pool port serves Config.ServingCert.
	LeaderTimeout time.Duration
	// SelfDeclared: in lease mode without a NodePool naming members, nodes that label their own Lease may lead
	// (--pool-self-declared-membership; see pool.Config).
	SelfDeclared bool
}

// newPool builds the pool from the configuration, or nil when sharing is off.
func (s *Server) newPool() (*pool.Pool, error) {
	pc := s.cfg.Pool
	if pc.Mode != pool.ModeLease || len(pc.Resources) == 0 {
		clearLeaseMarks(s.lease)
	}
	if len(pc.Resources) == 0 {
		return nil, nil
	}
	onRole := s.pm.setRole
	var onCandidacy func(string)
	var publish func(context.Context) error
	if pc.Mode == pool.ModeLease {
		publish = s.publishLease
		// Only a hub that can serve the pool stands: its lease is marked as the pool's while it
		// can, and the leader's also as the leader's, with its address (pool.LeaseMarks); without
		// the marks its lease costs the link what a node-level hub's does.
		marks := &leaseMarks{lease: s.lease, pool: s.cfg.NodePoolName, addr: pc.Addr}
		onCandidacy = func(reason string) { marks.set(func(m *leaseMarks) { m.stands = reason == "" }) }
		onRole = func(role, leader string) {
			s.pm.setRole(role, leader)
			marks.set(func(m *leaseMarks) { m.leads = role == "leader" })
		}
	}
	return pool.New(pool.Config{
		Resources: pc.Resources, Mode: pc.Mode, NodeName: s.cfg.NodeName, PoolName: s.cfg.NodePoolName,
		LeaseNamespace: pc.LeaseNamespace, Addr: pc.Addr, LeaderTimeout: pc.LeaderTimeout, Heartbeat: s.cfg.HeartbeatInterval,
		Cloud: s.cloud().RoundTrip, Credentials: s.cfg.Credentials,
		ServingCert: s.cfg.ServingCert,
		Log:         s.log, OnBytes: s.pm.bytes, OnRole: onRole, Tee: s.poolTee, Online: s.state.Online, OnPeerWatch: s.pm.peerWatch,
		Returned: s.state.Returned, OnlineSince: s.state.OnlineSince,
		SelfDeclared: pc.SelfDeclared, OnNotes: s.poolNotes(), OnCandidacy: onCandidacy, OnDegraded: s.pm.setDegraded,
		Publish: publish,
	})
}

// poolTee keeps what the shared stores receive in the cache too (as the hub's own component), so
// a hub restarted offline still answers those lists.
func (s *Server) poolTee(req *http.Request, resp *http.Response) {
	ri, err := wire.ParseURL(http.MethodGet, req.URL)
	if err != nil {
		return
	}
	ri.Component = cache.SelfComponent
	serve.Keep(s.cache, ri, ri.Component, resp)
}

// sharedResources are the resources cached for every client, whatever --cache-agents lists: the
// pool-scope resources (services and endpointslices when sharing is off), so a client with its
// own ServiceAccount reads what it last received offline, also after a restart.
func sharedResources(rs []pool.Resource) []string {
	if len(rs) == 0 {
		return []string{"/services", "discovery.k8s.io/endpointslices"}
	}
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.Group+"/"+r.Resource)
	}
	return out
}
