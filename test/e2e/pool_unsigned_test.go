package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"nodehub/e2e/harness"
)

// leaderMarks records, from a watch of the apiserver, which node Leases carry the pool's leader
// mark (nodehub.io/pool-leader=<pool>): the pool's holder history.
type leaderMarks struct {
	mu      sync.Mutex
	marked  map[string]bool
	history []string // "+edge-1", "-edge-1", in order
	most    int      // the most leases marked at once
}

func watchLeaderMarks(t *testing.T, ctx context.Context, pool string) *leaderMarks {
	t.Helper()
	w, err := cluster.Admin.CoordinationV1().Leases("kube-node-lease").Watch(ctx, metav1.ListOptions{LabelSelector: "nodehub.io/pool-leader=" + pool})
	if err != nil {
		t.Fatal(err)
	}
	m := &leaderMarks{marked: map[string]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			o, ok := ev.Object.(metav1.Object)
			if !ok {
				continue
			}
			m.mu.Lock()
			switch ev.Type {
			case watch.Added, watch.Modified:
				if !m.marked[o.GetName()] {
					m.history = append(m.history, "+"+o.GetName())
				}
				m.marked[o.GetName()] = true
			case watch.Deleted:
				m.history = append(m.history, "-"+o.GetName())
				delete(m.marked, o.GetName())
			}
			m.most = max(m.most, len(m.marked))
			m.mu.Unlock()
		}
	}()
	t.Cleanup(func() { w.Stop(); <-done })
	return m
}

func (m *leaderMarks) get() (history []string, now, most int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.history...), len(m.marked), m.most
}

// Issue 29 (4): a pool that cannot form costs no more than no pool. Three hubs in lease mode
// whose serving certificates nobody signs (no approver, no signer): once each elected itself and
// the election ran every 30 s. Now no hub leads (no lease is ever marked as the pool's leader),
// each serves its clients from its own shared store (node level), /v1/readyz and
// nodehub_pool_degraded say why, and the election's reads of the leases back off. Then the
// signer and an approver come: the certificates are signed, one hub leads, the others read from
// it, and readiness is clear.
func TestPoolWithoutServingCertificatesDoesNotForm(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	start := time.Now()
	bindNodes(t, "e2e-pool-election", rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"list", "watch"}})
	const pool = "pool-unsigned"
	poolFixture(t, ctx, pool, 2)
	marks := watchLeaderMarks(t, ctx, pool)
	edges := poolEdges(t, ctx, 3)
	var hubs []*poolHub
	for _, e := range edges {
		if err := os.Remove(e.ServingCertBundle); err != nil { // the harness's ready-made one
			t.Fatal(err)
		}
		ph := &poolHub{edge: e, port: harness.FreePort()}
		// One apiserver: the one whose request counts are read.
		ph.hub = startHubIn(t, e.Dir, cluster.APIServers[0].URL, append(e.PoolArgs("lease", ph.port), "--nodepool-name="+pool)...)
		hubs = append(hubs, ph)
	}

	// Signer off: nobody leads, everyone shares on its node and says why.
	eventually(t, 90*time.Second, "every hub on its node, degraded for want of a serving certificate", func() error {
		for _, ph := range hubs {
			if r := roleOf(ph); r != "none" {
				return fmt.Errorf("%s is %s", ph.edge.Name, r)
			}
			if v := metricOr(ph.hub, `nodehub_pool_degraded{reason="no-serving-certificate"}`); v != 1 {
				return fmt.Errorf("%s: nodehub_pool_degraded{reason=no-serving-certificate} %v", ph.edge.Name, v)
			}
			if _, body, err := ph.hub.Get("/v1/readyz"); err != nil || !strings.Contains(body, "pool degraded") || !strings.Contains(body, "no serving certificate") {
				return fmt.Errorf("%s readyz: %q %v", ph.edge.Name, body, err)
			}
			if v := metricOr(ph.hub, `nodehub_pool_received_bytes_total{source="cloud",resource="endpointslices"}`); v <= 0 {
				return fmt.Errorf("%s: its store read nothing from the cloud", ph.edge.Name)
			}
		}
		return nil
	})
	for _, ph := range hubs {
		if _, err := ph.hub.Client(kubeProxyUA, true).DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatalf("%s: its client's list: %v", ph.edge.Name, err)
		}
		if v := metricOr(ph.hub, `nodehub_pool_requests_total{verb="list",resource="endpointslices"}`); v < 1 {
			t.Fatalf("%s: the client's list was not served from its store (%v)", ph.edge.Name, v)
		}
	}
	// The election's reads of the leases over a window: a round (two lists) per hub whose wait
	// doubles from 30 s (no second round of a hub fits in the window), not one every 30 s and at
	// every failed dial of a leader.
	const window = 40 * time.Second
	before := readAPIServerCounts(t, ctx, "leases")
	windowStart := time.Now()
	time.Sleep(window) // a measuring window, not a wait for some state
	after := readAPIServerCounts(t, ctx, "leases")
	lists := after.done["LIST"] - before.done["LIST"]
	t.Logf("lease LISTs by 3 hubs in %v without serving certificates: %v", time.Since(windowStart).Round(time.Second), lists)
	if lists > 6 {
		t.Errorf("%v lease LISTs in %v, want ≤ 6 (a round of two lists per hub: the election backs off)", lists, window)
	}
	if h, _, _ := marks.get(); len(h) > 0 {
		t.Fatalf("without serving certificates the pool's leader marks were %v, want none", h)
	}

	// Signer on: certificates signed, one leader, the others follow, readiness clear.
	startControllerManager(t, 0)
	go func() {
		for ctx.Err() == nil {
			_, _ = cluster.ApprovePendingServingCSRs(ctx, "system:node:edge-1", "system:node:edge-2", "system:node:edge-3")
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	signed := time.Now()
	leader := waitLeader(t, hubs, nil, 2*time.Minute)
	eventually(t, 90*time.Second, "followers read from the leader, readiness clear", func() error {
		for _, ph := range hubs {
			if ph != leader {
				if v := metricOr(ph.hub, `nodehub_pool_received_bytes_total{source="leader",resource="endpointslices"}`); v <= 0 {
					return fmt.Errorf("%s: nothing from the leader yet", ph.edge.Name)
				}
			}
			if _, body, err := ph.hub.Get("/v1/readyz"); err != nil || strings.Contains(body, "pool degraded") {
				return fmt.Errorf("%s readyz: %q %v", ph.edge.Name, body, err)
			}
			if v := metricOr(ph.hub, `nodehub_pool_degraded{reason="no-serving-certificate"}`); v != 0 {
				return fmt.Errorf("%s: still degraded", ph.edge.Name)
			}
		}
		if _, now, _ := marks.get(); now != 1 {
			return fmt.Errorf("%d leases marked as the pool's leader", now)
		}
		return nil
	})
	h, _, most := marks.get()
	t.Logf("signed: %s leads %v after the signer came; the pool's leader marks %v (at most %d at once); %v in all",
		leader.edge.Name, time.Since(signed).Round(time.Second), h, most, time.Since(start).Round(time.Second))
	if most > 1 || h[len(h)-1] != "+"+leader.edge.Name {
		t.Fatalf("the pool's leader marks %v (%d at once), want one leader at a time, %s's last", h, most, leader.edge.Name)
	}
}

// servingCertIn puts a serving certificate of node for ip (from the cluster CA) where a hub with
// its files in dir reads it, as the cluster's signer would have issued it.
func servingCertIn(t *testing.T, dir, node string, ip net.IP) {
	t.Helper()
	c, k, err := cluster.PKI.Issue("serving-"+node+"-"+filepath.Base(dir), "system:node:"+node, []string{"system:nodes"}, []net.IP{ip}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var pem []byte
	for _, f := range []string{c, k} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pem = append(pem, b...)
	}
	bundle := filepath.Join(dir, "root", "pki", "yurthub-server-current.pem")
	if err := os.MkdirAll(filepath.Dir(bundle), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bundle, pem, 0o600); err != nil {
		t.Fatal(err)
	}
}
