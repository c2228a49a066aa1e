package hub

import (
	"sync"

	"nodehub/hub/metrics"
	"nodehub/pool"
)

// poolMetrics are the /metrics families of pool sharing.
type poolMetrics struct {
	received *metrics.CounterVec
	served   *metrics.CounterVec
	clients  *metrics.GaugeVec
	peers    *metrics.GaugeVec
	role     *metrics.GaugeVec
	leader   *metrics.GaugeVec
	degraded *metrics.GaugeVec

	mu                   sync.Mutex
	lastRole, lastLeader string
	lastDegraded         string
	// bySource are the received-bytes series already looked up (every read of a watch's body
	// adds to one: no label lookup per event).
	bySource map[sourceResource]metrics.Counter
}

type sourceResource struct{ source, resource string }

func newPoolMetrics(reg *metrics.Registry) *poolMetrics {
	return &poolMetrics{
		received: reg.NewCounter("nodehub_pool_received_bytes_total", "Response bytes the shared stores received, by source (cloud or leader) and resource.", "source", "resource"),
		served:   reg.NewCounter("nodehub_pool_requests_total", "Local lists and watches answered from the shared stores.", "verb", "resource"),
		clients:  reg.NewGauge("nodehub_pool_watches", "Local watches being served from the shared stores."),
		peers:    reg.NewGauge("nodehub_pool_follower_watches", "Followers' watches this hub serves as the pool's leader."),
		role:     reg.NewGauge("nodehub_pool_role", "This hub's role in its pool (1 for the current one): leader, follower or none.", "role"),
		leader:   reg.NewGauge("nodehub_pool_leader", "The pool's leader as this hub knows it (holder identity node@address), 1 for the current one.", "leader"),
		degraded: reg.NewGauge("nodehub_pool_degraded", "1 with the reason this hub shares on its node only in a pool mode (no serving certificate, leader unreachable, ...; /v1/readyz says more); 0 when it shares through the pool.", "reason"),
	}
}

// watchStores registers the gauges that read the stores' sizes at scrape time.
func (m *poolMetrics) watchStores(reg *metrics.Registry, p *pool.Pool) {
	size := func(window bool) float64 {
		var n int64
		for _, st := range p.Stores() {
			o, w, _ := st.Size()
			if window {
				o = w
			}
			n += o
		}
		return float64(n)
	}
	reg.NewGaugeFunc("nodehub_pool_store_bytes", "Raw bytes of the objects the shared stores hold.", func() float64 { return size(false) })
	reg.NewGaugeFunc("nodehub_pool_window_bytes", "Raw bytes of the shared stores' event windows (the newest events share the objects' bytes).", func() float64 { return size(true) })
	m.clients.Set(0)
	m.peers.Set(0)
}

func (m *poolMetrics) peerWatch(delta int) { m.peers.Add(float64(delta)) }

func (m *poolMetrics) bytes(source string, res pool.Resource, n int) {
	k := sourceResource{source, res.Resource}
	m.mu.Lock()
	c, ok := m.bySource[k]
	if !ok {
		if m.bySource == nil {
			m.bySource = map[sourceResource]metrics.Counter{}
		}
		c = m.received.With(source, res.Resource)
		m.bySource[k] = c
	}
	m.mu.Unlock()
	c.Add(float64(n))
}

func (m *poolMetrics) setRole(role, leader string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lastRole != "" {
		m.role.Set(0, m.lastRole)
	}
	if m.lastLeader != "" {
		m.leader.Set(0, m.lastLeader)
	}
	m.role.Set(1, role)
	m.lastRole = role
	if leader != "" {
		m.leader.Set(1, leader)
	}
	m.lastLeader = leader
}

// setDegraded sets nodehub_pool_degraded: 1 for the reason, the last one 0 ("" not degraded).
func (m *poolMetrics) setDegraded(reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lastDegraded != "" {
		m.degraded.Set(0, m.lastDegraded)
	}
	if reason != "" {
		m.degraded.Set(1, reason)
	}
	m.lastDegraded = reason
}
