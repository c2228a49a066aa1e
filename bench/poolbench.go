package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/e2e/harness"
)

// benchPool measures pool sharing: five hubs (edge-1..edge-5, pool addresses 127.0.0.2–6) behind a
// relay that counts what the apiserver sends, each with a kube-proxy-like and a coredns-like
// client watching services and endpointslices, while admin updates 10 EndpointSlices per second.
// It prints the cloud bytes during the updates with no sharing, node sharing only, and lease
// mode, and the leader's RSS and shared-store size.
func benchPool(e *env, o options) error {
	ctx := e.ctx
	ns := "pool"
	if err := servicesFixture(e, ns, o.poolServices, map[string]rbacv1.PolicyRule{
		"bench-pool-scope":    {APIGroups: []string{"", "discovery.k8s.io"}, Resources: []string{"services", "endpointslices"}, Verbs: []string{"get", "list", "watch"}},
		"bench-pool-election": {APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"list", "watch"}},
	}); err != nil {
		return err
	}
	var edges []*harness.Edge
	for i := 1; i <= 5; i++ {
		dir := filepath.Join(e.dir, fmt.Sprintf("pool-edge-%d", i))
		ed, err := e.c.NewEdge(ctx, fmt.Sprintf("edge-%d", i), net.IPv4(127, 0, 0, byte(i+1)), dir)
		if err != nil {
			return err
		}
		edges = append(edges, ed)
	}
	fmt.Printf("\n## pool sharing: 5 hubs, a kube-proxy-like and a coredns-like client each watching services and endpointslices (%d of each), 10 slice updates/s for %v; bytes the apiserver sent (counting relay)\n", o.poolServices, o.poolChurn)
	cloud := map[string]int64{}
	for _, mode := range []string{"none", "node", "lease"} {
		n, err := poolRun(e, o, mode, ns, edges)
		if err != nil {
			return fmt.Errorf("pool %s: %w", mode, err)
		}
		cloud[mode] = n
	}
	fmt.Printf("pool_cloud_bytes_none\t%.0f KiB\t(no sharing)\n", float64(cloud["none"])/1024)
	for _, m := range []struct{ mode, what string }{{"node", "node sharing"}, {"lease", "pool sharing, lease mode"}} {
		fmt.Printf("pool_cloud_bytes_%s\t%.0f KiB\t(%s: %.0f%% less)\n", m.mode, float64(cloud[m.mode])/1024, m.what, 100*(1-float64(cloud[m.mode])/float64(cloud["none"])))
	}
	return nil
}

// startPoolHubs starts one hub per edge behind relay in the pool mode (HUB_ENV: their
// environment); when one fails to start, those started are stopped.
func startPoolHubs(ctx context.Context, e *env, mode string, edges []*harness.Edge, relay *harness.Relay) ([]*harness.Hub, error) {
	var hubs []*harness.Hub
	for _, ed := range edges {
		h, err := e.c.StartHub(ctx, harness.HubOptions{Bin: e.bin, Dir: ed.Dir, Servers: relay.URL(), Args: ed.PoolArgs(mode, harness.FreePort()), Env: strings.Fields(os.Getenv("HUB_ENV"))})
		if err != nil {
			stopHubs(hubs)
			return nil, err
		}
		hubs = append(hubs, h)
	}
	return hubs, nil
}

func stopHubs(hubs []*harness.Hub) {
	for _, h := range hubs {
		h.Stop()
	}
}

// poolRun starts the five hubs in one mode, their clients, the updates, and returns the bytes the
// apiserver sent during the updates.
func poolRun(e *env, o options, mode, ns string, edges []*harness.Edge) (int64, error) {
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	relay, err := harness.NewRelay(strings.TrimPrefix(e.c.APIServers[0].URL, "https://"))
	if err != nil {
		return 0, err
	}
	defer relay.Close()
	hubs, err := startPoolHubs(ctx, e, mode, edges, relay)
	if err != nil {
		return 0, err
	}
	defer stopHubs(hubs)
	leader := -1
	deadline := time.Now().Add(90 * time.Second)
	for ready := false; !ready; {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("hubs not ready (stores synced, one leader) within 90s")
		}
		time.Sleep(500 * time.Millisecond)
		ready, leader = true, -1
		for i, h := range hubs {
			if err := h.WaitHTTP(ctx, "/v1/readyz", 30*time.Second); err != nil {
				return 0, err
			}
			if mode == "none" {
				continue
			}
			if v, _ := h.Metric("nodehub_pool_store_bytes"); v <= 0 {
				ready = false
			}
			if v, _ := h.Metric(`nodehub_pool_role{role="leader"}`); v == 1 {
				leader = i
			}
		}
		ready = ready && (mode != "lease" || leader >= 0)
	}
	var wg sync.WaitGroup
	for _, h := range hubs {
		for _, ua := range []string{kubeProxyUA, "coredns/1.11.1 (linux/arm64) kubernetes/bench"} {
			for _, path := range []string{"/api/v1/services", "/apis/discovery.k8s.io/v1/endpointslices"} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_ = watchStream(ctx, h.ProxyURL+path+"?watch=true&allowWatchBookmarks=true", ua)
				}()
			}
		}
	}
	time.Sleep(5 * time.Second) // the initial events
	before := relay.FromServer.Load()
	tick := time.NewTicker(100 * time.Millisecond)
	start := time.Now()
	for i := 0; time.Since(start) < o.poolChurn; i++ {
		<-tick.C
		if _, err := e.c.Admin.DiscoveryV1().EndpointSlices(ns).Update(ctx, profileSlice(i%o.poolServices, e.nextGen()), metav1.UpdateOptions{}); err != nil {
			tick.Stop()
			return 0, err
		}
	}
	tick.Stop()
	time.Sleep(2 * time.Second)
	sent := relay.FromServer.Load() - before
	switch mode {
	case "node":
		r, _ := rssKiB(hubs[0])
		fmt.Printf("pool_node_hub_rss\t%.1f MiB\n", float64(r)/1024)
	case "lease":
		h := hubs[leader]
		r, _ := rssKiB(h)
		store, _ := h.Metric("nodehub_pool_store_bytes")
		window, _ := h.Metric("nodehub_pool_window_bytes")
		fromCloud, _ := h.Metric(`nodehub_pool_received_bytes_total{source="cloud",resource="endpointslices"}`)
		fmt.Printf("pool_leader_rss\t%.1f MiB\t(%s)\n", float64(r)/1024, edges[leader].Name)
		fmt.Printf("pool_store_bytes\t%.0f KiB\t(raw objects held; the event window adds %.0f KiB, mostly shared with them)\n", store/1024, window/1024)
		fmt.Printf("pool_leader_endpointslice_bytes_from_cloud\t%.0f KiB\n", fromCloud/1024)
		f := hubs[(leader+1)%len(hubs)]
		fr, _ := rssKiB(f)
		fromLeader, _ := f.Metric(`nodehub_pool_received_bytes_total{source="leader",resource="endpointslices"}`)
		fmt.Printf("pool_follower_rss\t%.1f MiB\n", float64(fr)/1024)
		fmt.Printf("pool_follower_endpointslice_bytes_from_leader\t%.0f KiB\n", fromLeader/1024)
	}
	cancel()
	wg.Wait()
	return sent, nil
}

// nextGen numbers the pool benchmark's slice updates across its runs, so no update repeats the
// state a slice already has (the apiserver would send no event for it).
func (e *env) nextGen() int {
	e.gen++
	return e.gen
}
