package pool

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// lease is a node Lease labelled for the pool, renewed at renew, advertising addr.
func lease(t *testing.T, node, addr string, renew time.Time) *object {
	t.Helper()
	raw := fmt.Sprintf(`{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":%q,"namespace":"kube-node-lease","resourceVersion":"1","labels":{%q:"p"},"annotations":{%q:%q}},"spec":{"holderIdentity":%q,"leaseDurationSeconds":40,"renewTime":%q}}`,
		node, LabelPool, AnnotationAddress, addr, node, renew.UTC().Format("2006-01-02T15:04:05.000000Z07:00"))
	o, err := newObject([]byte(raw), Resource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func nodePool(t *testing.T, name string, rv int, nodes ...string) *object {
	t.Helper()
	q := make([]string, len(nodes))
	for i, n := range nodes {
		q[i] = fmt.Sprintf("%q", n)
	}
	raw := fmt.Sprintf(`{"kind":"NodePool","apiVersion":"apps.openyurt.io/v1beta2","metadata":{"name":%q,"resourceVersion":"%d"},"status":{"nodes":[%s]}}`, name, rv, strings.Join(q, ","))
	o, err := newObject([]byte(raw), nodePoolResource(name))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// The leader is the smallest fresh member of the pool's NodePool. Until the NodePool has been
// read, and without one, nobody leads: a node's own Lease label is no proof of membership —
// unless the operator accepts self-declared membership.
func TestElectionOnlyAmongNodePoolMembers(t *testing.T) {
	for _, selfDeclared := range []bool{false, true} {
		p, err := New(Config{Mode: ModeLease, NodeName: "edge-2", PoolName: "p", Addr: "10.0.0.2:10269", SelfDeclared: selfDeclared,
			Cloud: func(*http.Request) (*http.Response, error) { return nil, fmt.Errorf("offline") }})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		st := NewStore(Resource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"})
		st.replace([]*object{lease(t, "aaa-intruder", "10.9.9.9:10269", now), lease(t, "edge-1", "10.0.0.1:10269", now), lease(t, "edge-2", "10.0.0.2:10269", now)}, 5, "coordination.k8s.io/v1", "Lease")
		np := NewStore(nodePoolResource("p"))
		e := &elector{p: p, seen: map[string]renewal{}, passed: map[string]string{}, nodePool: np}

		want := ""
		if selfDeclared {
			want = "aaa-intruder@10.9.9.9:10269"
		}
		e.round(st, now)
		if p.leader != want {
			t.Fatalf("self-declared %v, NodePool not read yet: leader %q, want %q", selfDeclared, p.leader, want)
		}
		np.replace(nil, 6, "apps.openyurt.io/v1beta2", "NodePool") // listed: no such NodePool
		e.round(st, now)
		if p.leader != want {
			t.Fatalf("self-declared %v, no NodePool: leader %q, want %q", selfDeclared, p.leader, want)
		}
		np.replace([]*object{nodePool(t, "p", 7, "edge-1", "edge-2")}, 7, "apps.openyurt.io/v1beta2", "NodePool")
		e.round(st, now)
		if p.leader != "edge-1@10.0.0.1:10269" || p.leading {
			t.Fatalf("self-declared %v, with the NodePool's members: leader %q (leading %v), want edge-1", selfDeclared, p.leader, p.leading)
		}
		np.replace([]*object{nodePool(t, "p", 8, "edge-2")}, 8, "apps.openyurt.io/v1beta2", "NodePool")
		e.round(st, now)
		if p.leader != "edge-2@10.0.0.2:10269" || !p.leading {
			t.Fatalf("self-declared %v, edge-1 left the pool: leader %q (leading %v), want edge-2", selfDeclared, p.leader, p.leading)
		}
	}
}

func TestNodePoolResourceURL(t *testing.T) {
	if u := nodePoolResource("pool a").url("watch=1"); u != "/apis/apps.openyurt.io/v1beta2/nodepools?watch=1&fieldSelector=metadata.name%3Dpool+a" {
		t.Fatal(u)
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
	t0 := time.Now()
	st := NewStore(Resource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"})
	st.replace([]*object{lease(t, "edge-1", "10.0.0.1:10269", t0), lease(t, "edge-2", "10.0.0.2:10269", t0), lease(t, "edge-3", "10.0.0.3:10269", t0)}, 5, "coordination.k8s.io/v1", "Lease")

	// A follower (edge-3).
	p := newPool("edge-3")
	e := &elector{p: p, seen: map[string]renewal{}, passed: map[string]string{}}
	e.round(st, t0)
	if p.leader != "edge-1@10.0.0.1:10269" {
		t.Fatalf("leader %q, want edge-1", p.leader)
	}
	later := t0.Add(2 * time.Minute) // every lease expired in this hub's view: the cut
	e.round(st, later)
	if p.leader != "edge-1@10.0.0.1:10269" {
		t.Fatalf("offline, every lease expired: leader %q, want edge-1 kept", p.leader)
	}
	p.leaderFailed(p.leader, fmt.Errorf("connection refused"))
	if !p.failedAt.IsZero() {
		t.Fatal("offline, a failing leader sent the stores to an unreachable cloud")
	}
	online = true
	e.round(st, later)
	if p.leader != "edge-1@10.0.0.1:10269" {
		t.Fatalf("back online, edge-1's lease not renewed yet: leader %q, want edge-1 kept while it answers", p.leader)
	}
	p.leaderFailed(p.leader, fmt.Errorf("connection refused"))
	if up, _ := p.pick(); up.Name != "cloud" {
		t.Fatalf("online, the leader unreachable: upstream %q, want the cloud", up.Name)
	}
	e.round(st, later)
	if p.leader != "" {
		t.Fatalf("the expired leader failed this hub: leader %q, want none (every other lease expired)", p.leader)
	}

	// The leader (edge-1) itself.
	online = false
	p = newPool("edge-1")
	e = &elector{p: p, seen: map[string]renewal{}, passed: map[string]string{}}
	e.round(st, t0)
	if !p.Leading() {
		t.Fatal("edge-1 does not lead")
	}
	e.round(st, later)
	if !p.Leading() {
		t.Fatal("cut off, its own lease expired: the leader stepped down")
	}
	online = true
	p.returned = time.Now()
	e.round(st, later)
	if !p.Leading() {
		t.Fatal("just after the return: the leader stepped down before its heartbeat could renew")
	}
	p.returned = time.Now().Add(-time.Minute)
	e.round(st, later)
	if p.Leading() {
		t.Fatal("a lease duration after the return, still not renewed: the leader kept leading")
	}
}
