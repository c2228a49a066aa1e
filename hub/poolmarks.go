package hub

import (
	"context"
	"sync"

	"nodehub/hub/nodelease"
	"nodehub/pool"
)

// leaseMarks puts lease mode's marks on the node's lease (pool.LeaseMarks) from what the pool
// says: whether this hub stands (it can serve the pool) and whether it leads.
type leaseMarks struct {
	lease      *nodelease.Lease
	pool, addr string

	mu            sync.Mutex
	stands, leads bool
}

// set changes what the marks follow and puts them on the lease, from its next renewal on.
func (m *leaseMarks) set(change func(*leaseMarks)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	change(m)
	labels, annotations := pool.LeaseMarks(m.pool, m.addr, m.stands, m.leads)
	for k, v := range labels {
		m.lease.SetLabel(k, v)
	}
	for k, v := range annotations {
		m.lease.SetAnnotation(k, v)
	}
}

// clearLeaseMarks takes lease mode's marks off the lease at its next renewal, if it has them: a
// hub that ran in lease mode before (another --pool-mode now) would otherwise stand for a pool it
// no longer serves, elected and never leading, and pay for the marks in every renewal's answer.
func clearLeaseMarks(lease *nodelease.Lease) {
	(&leaseMarks{lease: lease}).set(func(*leaseMarks) {})
}

// publishLease renews the node's lease now, through the hub's cloud client (a healthy server;
// pool.Config.Publish): a hub that takes the lead puts its leader mark and pool address on the
// cloud at once, not at the next heartbeat.
func (s *Server) publishLease(ctx context.Context) error {
	return s.lease.Heartbeat(ctx, s.cloud())
}
