package pool

import (
	"context"
	"net/http"
	"strings"
	"time"

	"nodehub/wire"
)

// The pool's ballots are the hubs' own node Leases (kube-node-lease/<node>): NodeRestriction lets
// a node write no other Lease, and the hub renews its node's lease anyway. A hub in lease mode
// labels its lease with the pool and annotates it with its pool address (see LeaseMarks).
const (
	LabelPool         = "nodehub.io/pool"
	AnnotationAddress = "nodehub.io/pool-address"
)

// LeaseMarks are the label and annotation a hub in lease mode puts on its node's Lease.
func LeaseMarks(pool, addr string) (labels, annotations map[string]string) {
	return map[string]string{LabelPool: pool}, map[string]string{AnnotationAddress: addr}
}

// elect follows the pool's node leases (lease mode) until ctx ends: one watch on the leases in
// LeaseNamespace labelled with the pool. The leader is the member with the smallest node name
// among those whose lease is alive — renewed within its leaseDurationSeconds, as this hub's clock
// sees the renewals — so every hub reaches the same answer from the same leases without writing
// anything but its own lease. A dead hub (or a dead kubelet: the hub then stops renewing) stops
// renewing and the next member takes over. A leader that stops clears its address first, so the
// others move on at once. A leader that fails its followers (refused, reset, silent) is passed
// over by them until its lease is renewed again: the followers of a killed leader, which all see
// its connections fail at once, agree on the next member within a round instead of waiting for
// the dead lease to run out; a leader that was only cut off leads again once it renews.
func (p *Pool) elect(ctx context.Context) {
	st := NewStore(Resource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases",
		Namespace: p.cfg.LeaseNamespace, LabelSelector: LabelPool + "=" + p.cfg.PoolName})
	go st.run(ctx, func() (Upstream, <-chan struct{}) { return Upstream{Name: "cloud", Fetch: p.fetchElection}, nil }, p.log)
	e := &elector{p: p, seen: map[string]renewal{}, passed: map[string]string{}}
	tick := time.NewTicker(p.cfg.LeaderTimeout / 2)
	defer tick.Stop()
	for {
		e.round(st, time.Now())
		select {
		case <-ctx.Done():
			e.release()
			p.setLeader("", false)
			return
		case <-tick.C:
		case <-p.kick:
		}
	}
}

type elector struct {
	p      *Pool
	seen   map[string]renewal // node → its lease's last renewal as seen here
	passed map[string]string  // node → the renewal it failed this hub at: not eligible until a newer one
}

type renewal struct {
	mark string    // renewTime as written
	at   time.Time // when it was seen to change (the first time: the renewTime itself)
}

// round picks the leader from the leases as they are now.
func (e *elector) round(st *Store, now time.Time) {
	objs, _, _, err := st.snapshot()
	if err != nil {
		return // not listed yet (or no RBAC to): no leader, every store reads the cloud
	}
	suspect, _, _ := strings.Cut(e.p.takeSuspect(), "@")
	var members map[string]bool
	if e.p.cfg.Members != nil {
		if m, ok := e.p.cfg.Members(); ok {
			members = m
		}
	}
	best, bestAddr := "", ""
	for _, o := range objs {
		t, err := wire.Decode(o.raw)
		l, ok := t.(*wire.Lease)
		if err != nil || !ok {
			continue
		}
		addr := l.Annotations[AnnotationAddress]
		if addr == "" || l.Spec.RenewTime == nil || members != nil && !members[l.Name] {
			continue
		}
		mark := l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
		r, known := e.seen[l.Name]
		switch {
		case !known:
			r = renewal{mark: mark, at: l.Spec.RenewTime.Time}
			if r.at.After(now) {
				r.at = now
			}
		case r.mark != mark:
			r = renewal{mark: mark, at: now}
		}
		e.seen[l.Name] = r
		if l.Name == suspect {
			e.passed[l.Name] = mark
		}
		if m, ok := e.passed[l.Name]; ok {
			if m == mark {
				continue // it failed this hub and has not renewed since
			}
			delete(e.passed, l.Name)
		}
		dur := 40 * time.Second
		if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
			dur = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
		}
		if now.Sub(r.at) > dur {
			continue
		}
		if best == "" || l.Name < best {
			best, bestAddr = l.Name, addr
		}
	}
	if best == "" {
		e.p.setLeader("", false)
		return
	}
	e.p.setLeader(best+"@"+bestAddr, best == e.p.cfg.NodeName)
}

// release clears this hub's address from its lease when it leads, so the others elect the next
// member at their next round instead of waiting for the lease to run out.
func (e *elector) release() {
	if !e.p.Leading() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	body := `{"metadata":{"annotations":{"` + AnnotationAddress + `":null}}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPatch,
		"/apis/coordination.k8s.io/v1/namespaces/"+e.p.cfg.LeaseNamespace+"/leases/"+e.p.cfg.NodeName, strings.NewReader(body))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/merge-patch+json")
	req.Header.Set("Accept", wire.MediaJSON)
	req.Header.Set("User-Agent", "nodehub/pool")
	resp, err := e.p.cfg.Cloud(req)
	if err != nil {
		e.p.log.Warn("pool: leadership not released", "err", err)
		return
	}
	resp.Body.Close()
}

// fetchElection sends a GET to the cloud asking for protobuf: the election's leases this way are
// neither counted as pool-scope data nor cached.
func (p *Pool) fetchElection(ctx context.Context, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", wire.MediaProtobuf+", "+wire.MediaJSON)
	req.Header.Set("User-Agent", "nodehub/pool")
	return p.cfg.Cloud(req)
}
