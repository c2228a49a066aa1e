package pool

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// unableCloud is a cluster with OpenYurt (a NodePool naming its members) whose pool has no
// leader: it counts what the election asks for.
type unableCloud struct {
	mu                sync.Mutex
	nodePools, leases int
}

func (c *unableCloud) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	rec.Header().Set("Content-Type", "application/json")
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case strings.Contains(r.URL.Path, "nodepools"):
		c.nodePools++
		if r.URL.Query().Get("watch") == "true" {
			c.mu.Unlock()
			<-r.Context().Done() // a watch that stays open
			c.mu.Lock()
			return nil, r.Context().Err()
		}
		_, _ = rec.WriteString(`{"kind":"NodePoolList","apiVersion":"apps.openyurt.io/v1beta2","metadata":{"resourceVersion":"7"},"items":[]}`)
	default:
		c.leases++
		_, _ = rec.WriteString(`{"kind":"LeaseList","apiVersion":"coordination.k8s.io/v1","metadata":{"resourceVersion":"1"},"items":[]}`)
	}
	return rec.Result(), nil
}

func (c *unableCloud) counts() (nodePools, leases int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodePools, c.leases
}

// Issue 29 (4): a hub that cannot serve the pool, in a pool without a leader, reads no more of the
// cloud than a node-level hub: the NodePool (a list, and a watch whose bookmarks come every
// minute) is read only once a leader is marked or this hub turns able, and the leader's mark is
// listed once at start, again a minute later (a pool that starts together has elected by then),
// then only as often as a follower looks for a better leader.
func TestUnableHubReadsNoNodePoolWithoutALeader(t *testing.T) {
	cloud := &unableCloud{}
	p, err := New(Config{Mode: ModeLease, NodeName: "edge-1", PoolName: "p", Addr: "10.0.0.1:10269", Cloud: cloud.RoundTrip})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.elect(ctx, context.Background) }()
	for nodePools, leases := cloud.counts(); nodePools+leases == 0; nodePools, leases = cloud.counts() {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(time.Second) // a measuring window: the NodePool's store lists at once when it runs
	cancel()
	<-done
	if nodePools, leases := cloud.counts(); nodePools != 0 || leases != 1 {
		t.Fatalf("a hub that cannot serve the pool, without a leader: %d NodePool requests, %d lease lists in the first second; want none, one", nodePools, leases)
	}
	if reason, _ := p.Degraded(); reason != ReasonNoServingCert {
		t.Fatalf("degraded %q, want %q", reason, ReasonNoServingCert)
	}

	cannot := func(context.Context) (string, string) { return ReasonNoServingCert, "no serving certificate" }
	f := &fakeLeases{at: time.Now()}
	e := &elector{p: p, passed: map[string]string{}, list: f.list, canServe: cannot, readNodePool: func() {}}
	var waits []string
	for range 4 {
		waits = append(waits, e.round(context.Background(), time.Now()).String())
	}
	if want := fmt.Sprint([]string{time.Minute.String(), recheckFollowing.String(), recheckFollowing.String(), recheckFollowing.String()}); fmt.Sprint(waits) != want {
		t.Fatalf("a hub that cannot lead, without a leader, looks again after %v; want %v", waits, want)
	}
}
