package pool

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/listwatch"
	"nodehub/wire"
)

// fakeLeases are the pool's node Leases as the cloud has them, for an elector's list.
type fakeLeases struct {
	leases []*wire.Lease
	addrs  map[string]string // node → its pool address
	at     time.Time         // the apiserver's time
	err    error
	lists  []string // the selectors listed
}

// set puts node's lease, renewed at renew, advertising addr, marked as the pool's leader or not.
func (f *fakeLeases) set(node, addr string, renew time.Time, leader bool) {
	dur := int32(40)
	rt := metav1.NewMicroTime(renew)
	if f.addrs == nil {
		f.addrs = map[string]string{}
	}
	f.addrs[node] = addr
	labels, annotations := LeaseMarks("p", addr, true, leader)
	l := &wire.Lease{ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: "kube-node-lease", Labels: map[string]string{}, Annotations: map[string]string{}},
		Spec: wire.LeaseSpec{HolderIdentity: &node, LeaseDurationSeconds: &dur, RenewTime: &rt}}
	for k, v := range labels {
		if v != "" {
			l.Labels[k] = v
		}
	}
	for k, v := range annotations {
		if v != "" {
			l.Annotations[k] = v
		}
	}
	for i, o := range f.leases {
		if o.Name == node {
			f.leases[i] = l
			return
		}
	}
	f.leases = append(f.leases, l)
}

func (f *fakeLeases) list(_ context.Context, selector string) ([]*wire.Lease, time.Time, error) {
	f.lists = append(f.lists, selector)
	if f.err != nil {
		return nil, time.Time{}, f.err
	}
	k, v, _ := strings.Cut(selector, "=")
	var out []*wire.Lease
	for _, l := range f.leases {
		if l.Labels[k] == v {
			out = append(out, l)
		}
	}
	return out, f.at, nil
}

// round is one of e's rounds; when it elected a member whose lease does not say its address yet
// (only a leader's does), that member marks its lease as the leader's, as its next renewal would,
// and e looks again.
func (f *fakeLeases) round(ctx context.Context, e *elector, now time.Time) time.Duration {
	wait := e.round(ctx, now)
	if e.pending == "" {
		return wait
	}
	for _, l := range f.leases {
		if l.Name == e.pending {
			f.set(l.Name, f.addrs[l.Name], l.Spec.RenewTime.Time, true)
		}
	}
	return e.round(ctx, now)
}

// The leader is the smallest fresh member of the pool's NodePool (in status.nodes and named by
// the administrator). Until the NodePool has been read, and without one, nobody leads: a node's
// own Lease label is no proof of membership — unless the operator accepts self-declared
// membership.
func TestElectionOnlyAmongNodePoolMembers(t *testing.T) {
	for _, selfDeclared := range []bool{false, true} {
		p, err := New(Config{Mode: ModeLease, NodeName: "edge-2", PoolName: "p", Addr: "10.0.0.2:10269", SelfDeclared: selfDeclared,
			Cloud: func(*http.Request) (*http.Response, error) { return nil, fmt.Errorf("offline") }})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		f := &fakeLeases{at: now}
		f.set("aaa-intruder", "10.9.9.9:10269", now, false)
		f.set("edge-1", "10.0.0.1:10269", now, false)
		f.set("edge-2", "10.0.0.2:10269", now, false)
		np := NewStore(nodePoolResource("p"))
		e := &elector{p: p, passed: map[string]string{}, nodePool: np, list: f.list, canServe: servable, settleFor: new(time.Duration)}
		ctx := context.Background()

		want := ""
		if selfDeclared {
			want = "aaa-intruder@10.9.9.9:10269"
		}
		f.round(ctx, e, now)
		if p.leader != want {
			t.Fatalf("self-declared %v, NodePool not read yet: leader %q, want %q", selfDeclared, p.leader, want)
		}
		np.replace(nil, 6, "apps.openyurt.io/v1beta2", "NodePool") // listed: no such NodePool
		f.round(ctx, e, now)
		if p.leader != want {
			t.Fatalf("self-declared %v, no NodePool: leader %q, want %q", selfDeclared, p.leader, want)
		}
		np.replace([]*object{nodePoolNamed(t, "p", 7, "edge-1,edge-2", "edge-1", "edge-2")}, 7, "apps.openyurt.io/v1beta2", "NodePool")
		p.setLeader("", false)
		f.round(ctx, e, now)
		if p.leader != "edge-1@10.0.0.1:10269" || p.leading {
			t.Fatalf("self-declared %v, with the NodePool's members: leader %q (leading %v), want edge-1", selfDeclared, p.leader, p.leading)
		}
		np.replace([]*object{nodePoolNamed(t, "p", 8, "edge-1,edge-2", "edge-2")}, 8, "apps.openyurt.io/v1beta2", "NodePool")
		f.round(ctx, e, now)
		if p.leader != "edge-2@10.0.0.2:10269" || !p.leading {
			t.Fatalf("self-declared %v, edge-1 left the pool: leader %q (leading %v), want edge-2", selfDeclared, p.leader, p.leading)
		}
	}
}

// The election costs a hub O(1) whatever the pool's size: with a marked leader alive, a round
// lists only the marked leases (the leader's); the pool's members are listed only when no marked
// leader is alive. A marked leader is followed even when a smaller member is alive (no flapping);
// a marked leader steps down for a smaller marked one (a leader that was cut off and came back).
func TestElectionListsOnlyTheLeaderWhileThereIsOne(t *testing.T) {
	p, err := New(Config{Mode: ModeLease, NodeName: "edge-5", PoolName: "p", Addr: "10.0.0.5:10269", SelfDeclared: true,
		Cloud: func(*http.Request) (*http.Response, error) { return nil, fmt.Errorf("offline") }})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	f := &fakeLeases{at: now}
	for i := 1; i <= 30; i++ {
		f.set(fmt.Sprintf("edge-%d", i), fmt.Sprintf("10.0.0.%d:10269", i), now, i == 3)
	}
	e := &elector{p: p, passed: map[string]string{}, list: f.list, canServe: servable, settleFor: new(time.Duration)}
	ctx := context.Background()
	if next := e.round(ctx, now); p.leader != "edge-3@10.0.0.3:10269" || next != recheckFollowing {
		t.Fatalf("leader %q (next round in %v), want the marked edge-3, again in %v", p.leader, next, recheckFollowing)
	}
	if strings.Join(f.lists, ",") != LabelLeader+"=p" {
		t.Fatalf("listed %q, want only the leader's mark", f.lists)
	}
	// The marked leader dies: it fails this hub, and its lease runs out.
	f.lists = nil
	p.leaderFailed(p.leader, fmt.Errorf("connection refused"))
	f.at = now.Add(time.Minute)
	for i := 1; i <= 30; i++ {
		if i != 3 {
			f.set(fmt.Sprintf("edge-%d", i), fmt.Sprintf("10.0.0.%d:10269", i), f.at, false)
		}
	}
	e.round(ctx, f.at)
	if p.leader != "" || e.pending != "edge-1" || strings.Join(f.lists, ",") != LabelLeader+"=p,"+LabelPool+"=p" {
		t.Fatalf("after the leader died: leader %q, next %q, lists %q; want edge-1 from the members' list, not followed before its lease says its address", p.leader, e.pending, f.lists)
	}
	// While its lease does not say it, this hub looks again less and less often.
	if w1, w2 := e.round(ctx, f.at), e.round(ctx, f.at); w2 <= w1 || w2 > maxNoLeader || p.leader != "" {
		t.Fatalf("rounds waiting for the next leader's address wait %v then %v (leader %q), want a growing back-off", w1, w2, p.leader)
	}
	// edge-1 marks its lease as the leader's, with its address, at its next renewal.
	f.set("edge-1", "10.0.0.1:10269", f.at, true)
	f.lists = nil
	e.round(ctx, f.at)
	if p.leader != "edge-1@10.0.0.1:10269" || strings.Join(f.lists, ",") != LabelLeader+"=p" {
		t.Fatalf("after the leader died: leader %q, lists %q; want edge-1 from the members' list", p.leader, f.lists)
	}
}

// An expired lease is no proof of death when the renewals could not be seen (a region-wide cut):
// a follower keeps its leader until the leader itself fails it over the pool port; the leader
// keeps itself while it cannot reach the cloud and for a lease duration after the return, then
// steps down if its lease is still not renewed.
func TestElectionKeepsAnExpiredLeaderThatAnswers(t *testing.T) {
	online := false
	newPool := func(self string) *Pool {
		p, err := New(Config{Mode: ModeLease, NodeName: self, PoolName: "p", Addr: "10.0.0.9:10269", SelfDeclared: true,
			Online: func() bool { return online },
			Cloud:  func(*http.Request) (*http.Response, error) { return nil, fmt.Errorf("offline") }})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	ctx := context.Background()
	t0 := time.Now()
	f := &fakeLeases{at: t0}
	f.set("edge-1", "10.0.0.1:10269", t0, true)
	f.set("edge-2", "10.0.0.2:10269", t0, false)
	f.set("edge-3", "10.0.0.3:10269", t0, false)

	// A follower (edge-3).
	p := newPool("edge-3")
	e := &elector{p: p, passed: map[string]string{}, list: f.list, canServe: servable, settleFor: new(time.Duration)}
	e.round(ctx, t0)
	if p.leader != "edge-1@10.0.0.1:10269" {
		t.Fatalf("leader %q, want edge-1", p.leader)
	}
	f.err = fmt.Errorf("no healthy server") // the cut
	e.round(ctx, t0.Add(2*time.Minute))
	if p.leader != "edge-1@10.0.0.1:10269" {
		t.Fatalf("offline: leader %q, want edge-1 kept", p.leader)
	}
	p.leaderFailed(p.leader, fmt.Errorf("connection refused"))
	if !p.failedAt.IsZero() {
		t.Fatal("offline, a failing leader sent the stores to an unreachable cloud")
	}
	// Back: every lease expired as the apiserver sees it (nobody could renew).
	online, f.err, f.at = true, nil, t0.Add(2*time.Minute)
	e.round(ctx, f.at)
	if p.leader != "edge-1@10.0.0.1:10269" {
		t.Fatalf("back online, edge-1's lease not renewed yet: leader %q, want edge-1 kept while it answers", p.leader)
	}
	p.leaderFailed(p.leader, fmt.Errorf("connection refused"))
	if up, _ := p.pick(); up.Name != "cloud" {
		t.Fatalf("online, the leader unreachable: upstream %q, want the cloud", up.Name)
	}
	e.round(ctx, f.at)
	if p.leader != "" {
		t.Fatalf("the expired leader failed this hub: leader %q, want none (every other lease expired)", p.leader)
	}

	// The leader (edge-1) itself.
	online, f.at = false, t0
	p = newPool("edge-1")
	e = &elector{p: p, passed: map[string]string{}, list: f.list, canServe: servable, settleFor: new(time.Duration)}
	e.round(ctx, t0)
	if !p.Leading() {
		t.Fatal("edge-1 does not lead")
	}
	f.at = t0.Add(2 * time.Minute)
	p.since = time.Now().Add(-time.Hour)
	e.round(ctx, f.at)
	if !p.Leading() {
		t.Fatal("cut off, its own lease expired: the leader stepped down")
	}
	online = true
	p.returned = time.Now()
	e.round(ctx, f.at)
	if !p.Leading() {
		t.Fatal("just after the return: the leader stepped down before its heartbeat could renew")
	}
	p.returned = time.Now().Add(-time.Minute)
	e.round(ctx, f.at)
	if p.Leading() {
		t.Fatal("a lease duration after the return, still not renewed: the leader kept leading")
	}
}

func TestNodePoolResourceURL(t *testing.T) {
	if u := nodePoolResource("pool a").url("watch=1"); u != "/apis/apps.openyurt.io/v1beta2/nodepools?watch=1&fieldSelector=metadata.name%3Dpool+a" {
		t.Fatal(u)
	}
}

// Just back from a cut, a follower whose leader answers that it cannot reach the cloud yet (it
// comes back a little later) waits for it instead of reading the cloud itself; a follower online
// for long goes to the cloud at once.
func TestFollowerWaitsForALeaderComingBack(t *testing.T) {
	back := time.Now()
	p, err := New(Config{Mode: ModeLease, NodeName: "edge-3", PoolName: "p", Addr: "10.0.0.3:10269", LeaderTimeout: 5 * time.Second,
		OnlineSince: func() time.Time { return back },
		Cloud:       func(*http.Request) (*http.Response, error) { return nil, fmt.Errorf("offline") }})
	if err != nil {
		t.Fatal(err)
	}
	p.setLeader("edge-1@10.0.0.1:10269", false)
	p.since = time.Now().Add(-time.Hour)
	cut := &listwatch.StatusError{Code: http.StatusServiceUnavailable, RetryAfter: time.Second}
	p.leaderFailed(p.leader, cut)
	if up, _ := p.pick(); up.Name == "cloud" {
		t.Fatal("just back, the leader's 503 sent the stores to the cloud")
	}
	back = time.Now().Add(-time.Minute)
	p.leaderFailed(p.leader, cut)
	if up, _ := p.pick(); up.Name != "cloud" {
		t.Fatalf("online for a minute, the leader cut off: upstream %q, want the cloud", up.Name)
	}
	if s := p.takeSuspect(); s != "" {
		t.Fatalf("a leader that says it is cut off is passed over by the election (%q): at the region's return it would lose its pool", s)
	}
}

// A cluster without OpenYurt answers the election's NodePool list with 404: it is asked again
// after a minute (then less and less often), not every few seconds.
func TestElectionAsksForAMissingNodePoolRarely(t *testing.T) {
	var nodePools atomic.Int32
	p, err := New(Config{Mode: ModeLease, NodeName: "edge-1", PoolName: "p", Addr: "10.0.0.1:10269",
		Cloud: func(r *http.Request) (*http.Response, error) {
			rec := httptest.NewRecorder()
			rec.Header().Set("Content-Type", "application/json")
			if strings.Contains(r.URL.Path, "nodepools") {
				nodePools.Add(1)
				rec.WriteHeader(http.StatusNotFound)
				_, _ = rec.WriteString(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
				return rec.Result(), nil
			}
			// A leader is marked: this hub, which cannot lead, reads the NodePool (unable.go).
			_, _ = rec.WriteString(`{"kind":"LeaseList","apiVersion":"coordination.k8s.io/v1","metadata":{"resourceVersion":"1"},"items":[` +
				`{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"edge-0","namespace":"kube-node-lease","labels":{"nodehub.io/pool":"p","nodehub.io/pool-leader":"p"}}}]}`)
			return rec.Result(), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.elect(ctx, context.Background) }()
	for nodePools.Load() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // the old back-off (250 ms, doubling) asked 3 more times by now
	cancel()
	<-done
	if n := nodePools.Load(); n != 1 {
		t.Fatalf("the missing NodePool was asked for %d times in 1.5 s, want once", n)
	}
}

// servable is a hub that can serve the pool, for the election's tests.
func servable(context.Context) (string, string) { return "", "" }
