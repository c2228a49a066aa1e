package pool

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"nodehub/listwatch"
	"nodehub/wire"
)

// The pool's ballots are the hubs' own node Leases (kube-node-lease/<node>): NodeRestriction lets
// a node write no other Lease, and the hub renews its node's lease anyway. A hub in lease mode
// that can serve the pool labels its lease with the pool (LabelPool: it stands); the leader also
// labels it as the pool's leader and annotates it with its pool address (LabelLeader,
// AnnotationAddress; the hub sets them from OnRole). Every renewal's answer carries the lease's
// marks back, 8,640 times a day: the address, which only the leader's followers read, is on the
// leader's lease alone (a candidate's cost ~45 bytes a renewal, ~0.35 MiB a day per node).
const (
	LabelPool         = "nodehub.io/pool"
	LabelLeader       = "nodehub.io/pool-leader"
	AnnotationAddress = "nodehub.io/pool-address"
)

// LeaseMarks are the labels and annotations a hub in lease mode puts on its node's Lease (value
// "": removed): the pool's label while it stands (it can serve the pool), and while it leads the
// leader's label and its pool address.
func LeaseMarks(pool, addr string, stands, leads bool) (labels, annotations map[string]string) {
	if !stands {
		pool = ""
	}
	leader := ""
	if !leads {
		addr = ""
	} else {
		leader = pool
	}
	return map[string]string{LabelPool: pool, LabelLeader: leader}, map[string]string{AnnotationAddress: addr}
}

// stands says whether l stands for the pool: its pool label (or, from a hub of an earlier
// release, its pool address).
func (e *elector) stands(l *wire.Lease) bool {
	return l.Labels[LabelPool] == e.p.cfg.PoolName || l.Annotations[AnnotationAddress] != ""
}

// How often a hub looks at the pool's leader marks again while it has a leader: a leader, to
// step down for a better one (a leader that was cut off and came back), and a follower, to join
// the pool's leader if it ever followed another. Failures are noticed at once over the pool port.
const (
	recheckLeading   = 30 * time.Second
	recheckFollowing = 15 * time.Minute
)

// elect keeps this hub's idea of the pool's leader (lease mode) until ctx ends, at a cost to the
// cloud link that does not grow with the pool: no hub watches the pool's leases. A hub asks the
// cloud only when it needs a leader — at start, when its leader failed it over the pool port, and
// now and then (recheckLeading, recheckFollowing) — and then one list of the leases marked as
// the pool's leader (normally one object). The leader is the member with the smallest node name
// among the marked leases that are alive: renewed within their leaseDurationSeconds, as the
// apiserver's clock (the list's Date) sees it, so the nodes' clocks do not matter. Only when no
// marked lease is alive does the hub list the pool's leases (every member's; a pool without a
// leader) and follow the smallest live member, which, reaching the same answer, marks itself.
//
// An expired lease is no proof of death when the renewals could not be seen (a region-wide cut):
// a follower gives its leader up only when the leader fails it (unreachable, silent, no longer
// leading: leaderFailed), never because its lease ran out; a leader keeps itself while it cannot
// reach the cloud and for a lease duration after the return (keepExpired). A leader that failed
// this hub is passed over until it renews its lease again; a leader that stops clears its marks.
//
// Only the pool's members are candidates: the nodes of its NodePool's status.nodes that an
// administrator named in its AnnotationMembers (status.nodes follows a label a node can set on
// itself; the annotation a node cannot write). The NodePool is listed and watched here (one
// object; by a hub that cannot lead only once a leader is marked: unable.go), and until it has
// been read nobody is elected (every hub reads the cloud itself).
// Without a NodePool, or one naming no members, nobody is elected either, unless the operator
// accepts self-declared membership (Config.SelfDeclared).
//
// Stopping, a leader releases its lease by the stop deadline (stop, called once ctx has ended).
func (p *Pool) elect(ctx context.Context, stop func() context.Context) {
	np := NewStore(nodePoolResource(p.cfg.PoolName))
	// A cluster without OpenYurt serves no NodePool (404), and a node group without its RBAC may
	// not read it (403): asked again after a minute, then less and less often (up to half an
	// hour), not every 30 s (~1 MiB a day of refusals per node).
	np.Refused = time.Minute
	cloud := func() (Upstream, <-chan struct{}) { return Upstream{Name: "cloud", Fetch: p.fetchElection}, nil }
	var wg sync.WaitGroup
	defer wg.Wait()
	readNodePool := func() { // called once (startNodePool)
		wg.Add(1)
		go func() { defer wg.Done(); np.run(ctx, cloud, p.cfg.Returned, p.log) }()
	}
	(&elector{p: p, passed: map[string]string{}, nodePool: np, readNodePool: readNodePool}).run(ctx, stop)
}

// run holds rounds until ctx ends: at once, when the last round said, when a leader failed this
// hub (kick), and when whether this hub can serve the pool changed — checked on the node every
// LeaderTimeout, no cloud request.
func (e *elector) run(ctx context.Context, stop func() context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	check := time.NewTicker(e.p.cfg.LeaderTimeout)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			e.release(stop())
			e.p.setLeader("", false)
			return
		case <-check.C:
			if !e.candidacy(ctx) {
				continue
			}
			e.idle = 0
		case <-timer.C:
		case <-e.p.kick:
		}
		timer.Stop()
		timer.Reset(e.round(ctx, time.Now()))
	}
}

type elector struct {
	p       *Pool
	passed  map[string]string // node → the renewal it failed this hub at: not eligible until a newer one
	suspect string            // the leader that failed this hub since the last round
	pending string            // the next leader, elected, whose lease does not say its address yet
	// portMissed counts the failed checks of the pool port in a row while this hub could serve.
	portMissed int

	nodePool *Store // the pool's NodePool (one object, or none), listed and watched
	// readNodePool starts the NodePool's list and watch (nil once called, or when it runs
	// already): only when this hub can lead, or a leader is marked (unable.go).
	readNodePool func()
	npRV         uint64          // the resourceVersion members was read from
	read         bool            // members and declared were read (at npRV)
	members      map[string]bool // status.nodes named in AnnotationMembers (nil: none named)
	declared     map[string]bool // its status.nodes
	refused      refusal         // why no leader is elected
	idle         int             // rounds in a row that found no leader (their back-off doubles)
	// published is when this hub's lease was first seen standing for the pool (notePublished).
	published time.Time
	// settleFor, if set, replaces settle() (tests: 0).
	settleFor *time.Duration

	// canServe, if set, replaces Pool.canServe in tests.
	canServe func(ctx context.Context) (reason, why string)

	// list, if set, replaces the cloud in tests: the leases the selector selects and the
	// apiserver's time.
	list func(ctx context.Context, selector string) ([]*wire.Lease, time.Time, error)
}

// round decides the leader from the cloud's leases as they are now, and returns when to look
// again.
func (e *elector) round(ctx context.Context, now time.Time) time.Duration {
	retry := e.p.cfg.LeaderTimeout / 2
	e.candidacy(ctx)
	if wait, ok := e.unable(ctx, retry); ok {
		return wait
	}
	members, ok := e.mayLead(now)
	if !ok {
		return retry
	}
	if s, _, _ := strings.Cut(e.p.takeSuspect(), "@"); s != "" {
		e.suspect = s
	}
	best, addr, wait, err := e.choose(ctx, members)
	e.pending = ""
	switch {
	case err == nil && best != "" && addr == "":
		return e.awaitAddress(best, retry)
	case err != nil && !e.p.eligible():
		// The cloud cannot say, and this hub could not lead anyway: no hurry (at the cloud's
		// return the pool's hubs do not all list the leases at once).
		return doubled(max(retry, retryLeader), e.idle, maxNoLeader)
	case err != nil:
		return retry // the cloud cannot say: keep what this hub has
	case best == "":
		return e.noLeader(retry, wait)
	}
	return e.follow(ctx, best, addr)
}

// mayLead returns who may lead the pool (nil: any node's lease, self-declared), or false when
// this hub's membership is refused (it shares on its node).
func (e *elector) mayLead(now time.Time) (map[string]bool, bool) {
	members, declared, why := e.membership()
	if members == nil && !e.p.cfg.SelfDeclared {
		e.refuse(why, now)
		e.p.notes.setMembers(map[string]bool{})
		return nil, false
	}
	if members == nil {
		members = declared // self-declared: the NodePool's nodes, or (nil) any node's lease
	}
	e.refuse("", now)
	e.p.notes.setMembers(members)
	return members, true
}

// awaitAddress: the next leader is known, not yet where it serves: its address comes with its
// leader mark, at its next renewal. Meanwhile this hub reads the cloud, and looks again soon
// (less and less often while it does not come: no list every few seconds for good).
func (e *elector) awaitAddress(best string, retry time.Duration) time.Duration {
	e.pending = best
	e.idle++
	e.p.setLeader("", false)
	e.p.setNoLeaderWhy("the pool's next leader " + best + " has not published its address yet")
	return doubled(retry, e.idle-1, maxNoLeader)
}

// noLeader: nobody can lead (none live, or none can serve the pool): every hub shares on its
// node, and the election looks again less and less often, at once when this hub turns able.
func (e *elector) noLeader(retry, wait time.Duration) time.Duration {
	e.p.setLeader("", false)
	e.p.setNoLeaderWhy("no live member of the pool can serve it")
	e.idle++
	if !e.p.eligible() {
		return unableWait(e.idle)
	}
	if wait > 0 {
		return min(wait, doubled(retry, e.idle-1, maxNoLeader))
	}
	return doubled(retry, e.idle-1, maxNoLeader)
}

// follow takes best (at addr) as the pool's leader, this hub itself or another. A hub that takes
// the lead publishes it at once (publish).
func (e *elector) follow(ctx context.Context, best, addr string) time.Duration {
	e.idle = 0
	e.p.setNoLeaderWhy("")
	took := best == e.p.cfg.NodeName && !e.p.Leading()
	e.p.setLeader(best+"@"+addr, best == e.p.cfg.NodeName)
	if took {
		e.p.publish(ctx)
	}
	if best == e.p.cfg.NodeName && e.p.leadingFor() < leaseDuration(nil) {
		return leaseDuration(nil) / 4 // two hubs that took the lead at once see each other's marks soon
	}
	if best == e.p.cfg.NodeName {
		return recheckLeading
	}
	return recheckFollowing
}

// choose returns the pool's leader as the cloud's leases say: the smallest live member marked as
// the leader, else the smallest live member that can serve the pool. This hub takes the lead that
// way only once its candidacy has been on the cloud long enough for every other hub to have seen
// it (settled): two hubs turning able at once (their certificates signed together) do not both
// lead; until then it names no leader and says how long to wait.
func (e *elector) choose(ctx context.Context, members map[string]bool) (best, addr string, wait time.Duration, err error) {
	self := e.p.cfg.NodeName
	current, _, _ := strings.Cut(e.p.currentLeader(), "@")
	marked, at, err := e.leases(ctx, LabelLeader+"="+e.p.cfg.PoolName)
	if err != nil {
		return "", "", 0, err
	}
	best, addr = e.pick(marked, members, at, current)
	if (best == "" || self < best) && e.p.leadingFor() < leaseDuration(nil) && (members == nil || members[self]) && e.p.eligible() {
		// Leading since just now: the mark is not on the cloud's lease yet (the next heartbeat
		// writes it); a hub the administrator no longer names, or that can no longer serve the
		// pool, stops at once.
		return self, e.p.cfg.Addr, 0, nil
	}
	if best != "" || !e.p.eligible() {
		// A hub that cannot lead waits for a leader's mark: the pool's leases (a list that grows
		// with the pool) are read only by hubs that may take the lead.
		return best, addr, 0, nil
	}
	all, at, err := e.leases(ctx, LabelPool+"="+e.p.cfg.PoolName)
	if err != nil {
		return "", "", 0, err
	}
	e.notePublished(all, at)
	best, addr = e.pick(all, members, at, current)
	if best == self {
		if w := e.unsettled(at); w > 0 {
			return "", "", max(w, e.p.cfg.LeaderTimeout/2), nil
		}
	}
	return best, addr, 0, nil
}

// unsettled returns how long until this hub's candidacy has settled (0: it has): its lease seen
// standing for the pool for settle at the apiserver's time at, or this hub able to serve the
// pool for a heartbeat (the renewal that puts LeaseMarks back) and settle more on its own
// clock (a member that has long stood takes over at once when its leader dies).
func (e *elector) unsettled(at time.Time) time.Duration {
	local := e.p.cfg.Heartbeat + e.settle() - e.p.eligibleFor()
	if e.published.IsZero() {
		return max(local, 0)
	}
	return max(min(local, e.published.Add(e.settle()).Sub(at)), 0)
}

// notePublished records when this hub's lease was first seen (at the apiserver's time at) standing
// for the pool: with the pool's label (LeaseMarks); zero while it is not.
func (e *elector) notePublished(leases []*wire.Lease, at time.Time) {
	for _, l := range leases {
		if l.Name == e.p.cfg.NodeName {
			if !e.stands(l) || !e.p.eligible() {
				break
			}
			if e.published.IsZero() {
				e.published = at
			}
			return
		}
	}
	e.published = time.Time{}
}

// settle is how long this hub's candidacy is on the cloud before it takes the lead from the
// leases: a renewal of every other hub's lease (Config.Heartbeat, which carries its leader mark),
// and a leader timeout more for the writes.
func (e *elector) settle() time.Duration {
	if e.settleFor != nil {
		return *e.settleFor
	}
	return e.p.cfg.Heartbeat + e.p.cfg.LeaderTimeout
}

// candidacy checks whether this hub can serve the pool and records it (Pool.setCandidacy); it
// reports whether that changed. A pool port that accepted connections and misses a dial is not
// down yet: on a loaded node (a leader's port with 99 followers, 2 cores at a load of 70) one
// dial timed out now and then, and the leader stepped down at once, every follower reading the
// cloud again (3.8 GiB a day per node at 100 hubs). It is down after portChecks failed checks in
// a row; a port that is really down its followers notice first.
func (e *elector) candidacy(ctx context.Context) bool {
	f := e.canServe
	if f == nil {
		f = e.p.canServe
	}
	reason, why := f(ctx)
	if reason == ReasonPortDown && e.p.eligible() && e.portMissed+1 < portChecks {
		e.portMissed++
		return false
	}
	e.portMissed = 0
	return e.p.setCandidacy(reason, why)
}

// portChecks failed checks of the pool port in a row take an able hub's candidacy away.
const portChecks = 3

// pick returns the smallest eligible live member among leases (and its address, "" when its lease
// does not say it yet: only a leader's does): a member that stands for the pool (a hub that cannot
// serve the pool does not; this hub: its own check), not passed over, renewed within its duration
// at the apiserver's time at — or the current leader whose lease only looks expired (keepExpired).
func (e *elector) pick(leases []*wire.Lease, members map[string]bool, at time.Time, current string) (string, string) {
	best, bestAddr := "", ""
	for _, l := range leases {
		addr := l.Annotations[AnnotationAddress]
		if l.Name == e.p.cfg.NodeName {
			addr = e.p.cfg.Addr
		}
		if !e.stands(l) || l.Spec.RenewTime == nil || members != nil && !members[l.Name] {
			continue
		}
		if l.Name == e.p.cfg.NodeName && !e.p.eligible() {
			continue // it cannot serve the pool (its lease may not say so yet)
		}
		if l.Name == e.suspect {
			e.passed[l.Name], e.suspect = mark(l), ""
		}
		if m, ok := e.passed[l.Name]; ok {
			if m == mark(l) {
				continue // it failed this hub and has not renewed since
			}
			delete(e.passed, l.Name)
		}
		dur := leaseDuration(l)
		if at.Sub(l.Spec.RenewTime.Time) > dur && (l.Name != current || !e.p.keepExpired(l.Name == e.p.cfg.NodeName, dur)) {
			continue // dead, unless it is the leader and nothing says so but its lease (keepExpired)
		}
		if best == "" || l.Name < best {
			best, bestAddr = l.Name, addr
		}
	}
	return best, bestAddr
}

func mark(l *wire.Lease) string { return l.Spec.RenewTime.UTC().Format(time.RFC3339Nano) }

// leaseDuration is a lease's leaseDurationSeconds (kubelet's 40 s when unset).
func leaseDuration(l *wire.Lease) time.Duration {
	if l != nil && l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return 40 * time.Second
}

// leases lists the leases in LeaseNamespace that selector selects, with the apiserver's time of
// the answer (its Date; this hub's clock when it has none).
func (e *elector) leases(ctx context.Context, selector string) ([]*wire.Lease, time.Time, error) {
	if e.list != nil {
		return e.list(ctx, selector)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*e.p.cfg.LeaderTimeout)
	defer cancel()
	at := time.Now()
	fetch := func(ctx context.Context, path string) (*http.Response, error) {
		resp, err := e.p.fetchElection(ctx, path)
		if err == nil {
			if d, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
				at = d
			}
		}
		return resp, err
	}
	res := Resource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases", Namespace: e.p.cfg.LeaseNamespace, LabelSelector: selector}
	var out []*wire.Lease
	_, err := listwatch.List(ctx, fetch, res.url("resourceVersion=0"), func(raw []byte) error {
		if t, err := wire.Decode(raw); err == nil {
			if l, ok := t.(*wire.Lease); ok {
				out = append(out, l)
			}
		}
		return nil
	})
	return out, at, err
}

// membership returns the pool's members — the nodes of its NodePool's status.nodes an
// administrator named (AnnotationMembers) — or nil and why there are none: the NodePool not listed
// yet (or not readable: RBAC, no such API), absent, or naming no members. declared are its
// status.nodes when it has been read (nil otherwise).
func (e *elector) membership() (members, declared map[string]bool, why string) {
	if e.nodePool == nil {
		return nil, nil, "the pool's NodePool is not read"
	}
	objs, _, _, err := e.nodePool.snapshot()
	if err != nil {
		return nil, nil, "the NodePool " + e.p.cfg.PoolName + " has not been read (the node group needs list and watch on nodepools.apps.openyurt.io)"
	}
	for _, o := range objs {
		if o.name != e.p.cfg.PoolName {
			continue
		}
		if !e.read || o.rv != e.npRV {
			e.members, e.declared, _ = nodePoolMembers(o.raw)
			e.npRV, e.read = o.rv, true
		}
		if e.members == nil {
			return nil, e.declared, noMembersWhy(e.p.cfg.PoolName)
		}
		return e.members, e.declared, ""
	}
	e.read, e.members, e.declared = false, nil, nil
	return nil, nil, "no NodePool " + e.p.cfg.PoolName + " names the pool's members"
}

// refuse elects nobody, saying why once it has lasted two leader timeouts (a hub just started
// has not read the NodePool yet); why "" clears the refusal.
func (e *elector) refuse(why string, now time.Time) {
	log := e.refused.set(why, now, 2*e.p.cfg.LeaderTimeout)
	if why == "" {
		return
	}
	e.p.setLeader("", false)
	if log {
		e.p.log.Warn("pool: lease mode elects no leader, every hub shares on its node only: "+why+"; a node can label itself into a pool (--pool-self-declared-membership accepts that)", "pool", e.p.cfg.PoolName)
	}
}

// nodePoolResource is the one NodePool of the pool (OpenYurt's apps.openyurt.io/v1beta2).
func nodePoolResource(pool string) Resource {
	return Resource{Group: "apps.openyurt.io", Version: "v1beta2", Resource: "nodepools", FieldSelector: "metadata.name=" + pool}
}

// release clears this hub's leader mark and address from its lease when it leads, so the others
// elect the next member at once instead of waiting for the lease to run out, by ctx (the stop
// deadline).
func (e *elector) release(ctx context.Context) {
	if !e.p.Leading() {
		return
	}
	body := `{"metadata":{"labels":{"` + LabelLeader + `":null},"annotations":{"` + AnnotationAddress + `":null}}}`
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

// publish renews this hub's lease now (Config.Publish), with the leader's mark and its pool
// address OnRole has just set: the pool's other hubs, which know the next leader but not where it
// serves until its lease says so (awaitAddress), read the cloud meanwhile — without it for up to a
// heartbeat more. A failure is only logged: the next heartbeat publishes it.
func (p *Pool) publish(ctx context.Context) {
	if p.cfg.Publish == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*p.cfg.LeaderTimeout)
	defer cancel()
	if err := p.cfg.Publish(ctx); err != nil {
		p.log.Info("pool: the lead not published at once; the next heartbeat publishes it", "err", err)
	}
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
