package pool

import (
	"fmt"
	"net/http"
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

// The leader is the smallest fresh member; when the NodePool names the pool's nodes, a node that
// only labelled its own Lease is not a candidate.
func TestElectionOnlyAmongNodePoolMembers(t *testing.T) {
	var members map[string]bool
	known := false
	p, err := New(Config{Mode: ModeLease, NodeName: "edge-2", PoolName: "p", Addr: "10.0.0.2:10269",
		Cloud:   func(*http.Request) (*http.Response, error) { return nil, fmt.Errorf("offline") },
		Members: func() (map[string]bool, bool) { return members, known }})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	st := NewStore(Resource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"})
	st.replace([]*object{lease(t, "aaa-intruder", "10.9.9.9:10269", now), lease(t, "edge-1", "10.0.0.1:10269", now), lease(t, "edge-2", "10.0.0.2:10269", now)}, 5, "coordination.k8s.io/v1", "Lease")
	e := &elector{p: p, seen: map[string]renewal{}, passed: map[string]string{}}

	e.round(st, now)
	if p.leader != "aaa-intruder@10.9.9.9:10269" {
		t.Fatalf("no NodePool known: leader %q, want the smallest labelled lease", p.leader)
	}
	members, known = map[string]bool{"edge-1": true, "edge-2": true}, true
	e.round(st, now)
	if p.leader != "edge-1@10.0.0.1:10269" || p.leading {
		t.Fatalf("with the NodePool's members: leader %q (leading %v), want edge-1", p.leader, p.leading)
	}
}
