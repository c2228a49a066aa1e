package pool

import (
	"context"
	"encoding/json"
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
//
// Only the nodes the pool's NodePool names (status.nodes: yurt-manager writes it, a node cannot)
// are candidates; the NodePool is listed and watched here, and until it has been read nobody is
// elected (every hub reads the cloud itself). Without a NodePool nobody is elected either, unless
// the operator accepts self-declared membership (Config.SelfDeclared).
func (p *Pool) elect(ctx context.Context) {
	st := NewStore(Resource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases",
		Namespace: p.cfg.LeaseNamespace, LabelSelector: LabelPool + "=" + p.cfg.PoolName})
	cloud := func() (Upstream, <-chan struct{}) { return Upstream{Name: "cloud", Fetch: p.fetchElection}, nil }
	go st.run(ctx, cloud, p.cfg.Returned, p.log)
	np := NewStore(nodePoolResource(p.cfg.PoolName))
	go np.run(ctx, cloud, p.cfg.Returned, p.log)
	e := &elector{p: p, seen: map[string]renewal{}, passed: map[string]string{}, nodePool: np}
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

	nodePool  *Store          // the pool's NodePool (one object, or none), listed and watched
	npRV      uint64          // the resourceVersion members was read from
	members   map[string]bool // its status.nodes
	refusal   string          // why no leader is elected
	refusedAt time.Time       // since when
	logged    bool            // the refusal was logged
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
	current, _, _ := strings.Cut(e.p.currentLeader(), "@")
	members, why := e.membership()
	if members == nil && !e.p.cfg.SelfDeclared {
		e.refuse(why, now)
		return
	}
	e.refuse("", now)
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
		if now.Sub(r.at) > dur && (l.Name != current || !e.p.keepExpired(l.Name == e.p.cfg.NodeName, dur)) {
			continue // dead, unless it is the leader and nothing says so but its lease (keepExpired)
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

// membership returns the pool's nodes as its NodePool names them, or nil and why they are not
// known: the NodePool not listed yet (or not readable: RBAC, no such API), or absent.
func (e *elector) membership() (map[string]bool, string) {
	if e.nodePool == nil {
		return nil, "the pool's NodePool is not read"
	}
	objs, _, _, err := e.nodePool.snapshot()
	if err != nil {
		return nil, "the NodePool " + e.p.cfg.PoolName + " has not been read (the node group needs list and watch on nodepools.apps.openyurt.io)"
	}
	for _, o := range objs {
		if o.name != e.p.cfg.PoolName {
			continue
		}
		if e.members == nil || o.rv != e.npRV {
			e.members, e.npRV = nodePoolNodes(o.raw), o.rv
		}
		return e.members, ""
	}
	e.members = nil
	return nil, "no NodePool " + e.p.cfg.PoolName + " names the pool's nodes"
}

// refuse elects nobody, saying why once it has lasted two leader timeouts (a hub just started
// has not read the NodePool yet); why "" clears the refusal.
func (e *elector) refuse(why string, now time.Time) {
	if why != e.refusal {
		e.refusal, e.refusedAt, e.logged = why, now, false
	}
	if why == "" {
		return
	}
	e.p.setLeader("", false)
	if !e.logged && now.Sub(e.refusedAt) >= 2*e.p.cfg.LeaderTimeout {
		e.logged = true
		e.p.log.Warn("pool: lease mode elects no leader: "+why+"; a node's own Lease label is no proof of membership (--pool-self-declared-membership accepts it)", "pool", e.p.cfg.PoolName)
	}
}

// nodePoolResource is the one NodePool of the pool (OpenYurt's apps.openyurt.io/v1beta2).
func nodePoolResource(pool string) Resource {
	return Resource{Group: "apps.openyurt.io", Version: "v1beta2", Resource: "nodepools", FieldSelector: "metadata.name=" + pool}
}

// nodePoolNodes reads a NodePool's status.nodes (never nil: an empty pool has no candidates).
func nodePoolNodes(raw []byte) map[string]bool {
	var np struct {
		Status struct {
			Nodes []string `json:"nodes"`
		} `json:"status"`
	}
	out := map[string]bool{}
	if json.Unmarshal(raw, &np) == nil {
		for _, n := range np.Status.Nodes {
			out[n] = true
		}
	}
	return out
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
