package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"nodehub/e2e/harness"
)

const benchKubeletUA = "kubelet/v1.34.4 (linux/arm64) kubernetes/bench"

// benchCloud is what nodehub costs the cloud (issue 21): N hubs (each its own node, pool
// addresses 127.0.1.x) behind one counting relay, each with a kubelet-like client (watches of its
// node, its pods and the services; a GET of its node and of its lease every 10 s) and a
// kube-proxy-like one (watches of services, endpointslices, its node and servicecidrs), over
// -cloud-services Services with a 10-endpoint slice each. For N in -cloud-sizes and node-level,
// lease mode and lease mode whose serving certificates nobody signs (unsigned) it prints the idle uplink per node per day in each direction (and by purpose, from
// nodehub_cloud_bytes_total), then black-holes the link for -cloud-cut while 5 slice updates/s
// go on, and prints what the return cost the apiserver (its own LIST and WATCH counts, its and
// etcd's CPU, the bytes it sent) and how long a change made 3 s after the return took to reach
// every kube-proxy-like client, and how many of their EndpointSlice watches (list, then watch from
// the list's resourceVersion, as client-go's reflector) ended in 410 (issue 29). YurtHub is not
// run here (no build of it in this harness).
func benchCloud(e *env, o options) error {
	ctx := e.ctx
	ns := "cloud"
	if err := servicesFixture(e, ns, o.cloudServices, map[string]rbacv1.PolicyRule{
		"bench-cloud-scope":    {APIGroups: []string{"", "discovery.k8s.io"}, Resources: []string{"services", "endpointslices"}, Verbs: []string{"get", "list", "watch"}},
		"bench-cloud-cidrs":    {APIGroups: []string{"networking.k8s.io"}, Resources: []string{"servicecidrs"}, Verbs: []string{"get", "list", "watch"}},
		"bench-cloud-election": {APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"list", "watch"}},
	}); err != nil {
		return err
	}
	fmt.Printf("\n## cloud cost (issue 21): N hubs behind a counting relay; each a kubelet-like client (watches its node, its pods, services; GETs its node and its lease every 10 s) and a kube-proxy-like one (watches services, endpointslices, its node, servicecidrs); %d Services with a 10-endpoint slice each; idle %v; then the link black-holed for %v while 5 slice updates/s go on; TCP payload counted by the relay. YurtHub: not run here (no YurtHub build in this harness); issue 21 quotes YurtHub v1.7 on the same workload at 10 hubs: idle 8.1 MiB/day cloud→edge, 7.0 edge→cloud; return 5 LISTs (0.26 MB), 59 WATCHes, 2.6 s apiserver+etcd CPU, a change after 5.7 s\n", o.cloudServices, o.cloudIdle, o.cloudCut)
	var sizes []int
	for _, s := range strings.Split(o.cloudSizes, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil && n > 0 {
			sizes = append(sizes, n)
		}
	}
	var edges []*harness.Edge
	for _, n := range sizes {
		for i := len(edges); i < n; i++ {
			dir := filepath.Join(e.dir, fmt.Sprintf("cloud-edge-%d", i+1))
			ed, err := e.c.NewEdge(ctx, fmt.Sprintf("cloud-%02d", i+1), net.IPv4(127, 0, 1, byte(i+2)), dir)
			if err != nil {
				return err
			}
			edges = append(edges, ed)
		}
		for _, mode := range strings.Split(o.cloudModes, ",") {
			if err := cloudRun(e, o, mode, ns, edges[:n]); err != nil {
				return fmt.Errorf("cloud %s N=%d: %w", mode, n, err)
			}
		}
	}
	return nil
}

// servingCerts approves and signs the hubs' kubelet-serving CSRs, as the cluster's approver
// (OpenYurt's yurt-manager) and signer (kube-controller-manager's csrsigning) do, from the hubs'
// start (a hub whose stored certificate does not name its pool address asks for a new one, and
// its peers refuse its pool port until it has it). A CSR left pending would be waited for on a
// watch, which is not what an idle node in a cluster that signs them costs. done stops the
// approver, once nothing it should sign waits, and the signer, before anything is measured.
func servingCerts(ctx context.Context, e *env, edges []*harness.Edge) (done func() error, err error) {
	signer, err := e.c.StartControllerManager(ctx, harness.ControllerOptions{Controllers: []string{"csrsigning"}})
	if err != nil {
		return nil, err
	}
	go func() { <-ctx.Done(); signer.Stop() }() // when the run ends early
	var users []string
	for _, ed := range edges {
		users = append(users, "system:node:"+ed.Name)
	}
	waiting := func() (int, error) {
		if _, err := e.c.ApprovePendingServingCSRs(ctx, users...); err != nil {
			return 0, err
		}
		list, err := e.c.Admin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		n := 0
		for _, csr := range list.Items {
			if slices.Contains(users, csr.Spec.Username) && len(csr.Status.Certificate) == 0 {
				n++
			}
		}
		return n, nil
	}
	actx, stop := context.WithCancel(ctx)
	approved := make(chan struct{})
	go func() {
		defer close(approved)
		for actx.Err() == nil {
			_, _ = waiting()
			select {
			case <-actx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return func() error {
		stop()
		<-approved
		defer signer.Stop()
		wait := 2*time.Minute + time.Duration(len(edges))*time.Second
		for deadline := time.Now().Add(wait); ; time.Sleep(500 * time.Millisecond) {
			n, err := waiting()
			if err != nil || n == 0 {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%d serving CSRs not issued within %v", n, wait)
			}
		}
	}, nil
}

// cloudWatch is one client's watch through a hub, watched again (from "") when it ends.
type cloudWatch struct{}

func (w *cloudWatch) run(ctx context.Context, url, ua string) {
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Header.Set("User-Agent", ua)
		req.Header.Set("Accept", "application/vnd.kubernetes.protobuf")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			time.Sleep(time.Second)
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		time.Sleep(time.Second) // a watch that ended: again, as an informer would (from "")
	}
}

// apiCounts is the apiserver's account of requests by resource and verb: completed
// (apiserver_request_total) and watches open (apiserver_longrunning_requests).
type apiCounts map[string]float64 // "resource verb" → completed; "resource open" → open watches

func readAPICounts(e *env) (apiCounts, error) {
	raw, err := e.c.Admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(e.ctx)
	if err != nil {
		return nil, err
	}
	c := apiCounts{}
	for _, line := range strings.Split(string(raw), "\n") {
		total := strings.HasPrefix(line, "apiserver_request_total{")
		open := strings.HasPrefix(line, "apiserver_longrunning_requests{")
		if !total && !open || strings.Contains(line, `subresource="status"`) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		res, verb := label(line, "resource"), label(line, "verb")
		if total {
			c[res+" "+verb] += v
		} else if verb == "WATCH" {
			c[res+" open"] += v
		}
	}
	return c, nil
}

func label(line, name string) string {
	i := strings.Index(line, name+`="`)
	if i < 0 {
		return ""
	}
	rest := line[i+len(name)+2:]
	return rest[:strings.IndexByte(rest, '"')]
}

// startedSince is how many requests of verb on resource began between a and b.
func startedSince(a, b apiCounts, resource, verb string) float64 {
	n := b[resource+" "+verb] - a[resource+" "+verb]
	if verb == "WATCH" {
		n += b[resource+" open"] - a[resource+" open"]
	}
	return n
}

// cloudRun is one size and mode: idle, then the return.
func cloudRun(e *env, o options, mode, ns string, edges []*harness.Edge) error {
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	n := len(edges)
	relay, err := harness.NewRelay(strings.TrimPrefix(e.c.APIServers[0].URL, "https://"))
	if err != nil {
		return err
	}
	defer relay.Close()
	hubMode, certsDone := mode, func() error { return nil }
	if mode == "unsigned" || mode == "node-unsigned" {
		// Lease mode in a cluster that signs no serving certificate (no approver, or no signer):
		// the hubs cannot serve the pool and none may lead (issue 29 item 4); node-unsigned is node
		// level in the same cluster (its hubs wait on the same pending serving CSRs), to compare
		// like with like.
		hubMode = "lease"
		if mode == "node-unsigned" {
			hubMode = "node"
		}
		for _, ed := range edges {
			if err := os.Remove(ed.ServingCertBundle); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
	}
	hubs, err := startPoolHubs(ctx, e, hubMode, edges, relay)
	if err != nil {
		return err
	}
	defer stopHubs(hubs)
	if mode != "unsigned" && mode != "node-unsigned" {
		if certsDone, err = servingCerts(ctx, e, edges); err != nil {
			return err
		}
	}
	// 100 hubs on a loaded machine start slower than 10: the wait grows with the pool.
	wait := 3*time.Minute + time.Duration(n)*3*time.Second
	deadline := time.Now().Add(wait)
	for ready := false; !ready; {
		if time.Now().After(deadline) {
			return fmt.Errorf("hubs not ready (stores synced, one leader) within %v", wait)
		}
		time.Sleep(time.Second)
		ready = true
		leaders := 0
		for _, h := range hubs {
			if err := h.WaitHTTP(ctx, "/v1/readyz", 30*time.Second); err != nil {
				return err
			}
			if v, _ := h.Metric("nodehub_pool_store_bytes"); v <= 0 {
				ready = false
			}
			if v, _ := h.Metric(`nodehub_pool_role{role="leader"}`); v == 1 {
				leaders++
			}
		}
		ready = ready && (mode != "lease" || leaders == 1) && (mode != "unsigned" || leaders == 0)
	}
	if err := certsDone(); err != nil {
		return err
	}
	var proxies []*benchReflector
	var wg sync.WaitGroup
	watch := func(url, ua string) {
		w := &cloudWatch{}
		wg.Add(1)
		go func() { defer wg.Done(); w.run(ctx, url, ua) }()
	}
	for i, h := range hubs {
		node := edges[i].Name
		byName := "fieldSelector=" + url("metadata.name="+node)
		watch(h.ProxyURL+"/api/v1/nodes?watch=true&allowWatchBookmarks=true&"+byName, benchKubeletUA)
		watch(h.ProxyURL+"/api/v1/pods?watch=true&allowWatchBookmarks=true&fieldSelector="+url("spec.nodeName="+node), benchKubeletUA)
		watch(h.ProxyURL+"/api/v1/services?watch=true&allowWatchBookmarks=true", benchKubeletUA)
		watch(h.ProxyURL+"/api/v1/services?watch=true&allowWatchBookmarks=true", kubeProxyUA)
		slices := &benchReflector{} // list, then watch from the list's resourceVersion, as client-go
		wg.Add(1)
		go func() {
			defer wg.Done()
			slices.run(ctx, h.ProxyURL+"/apis/discovery.k8s.io/v1/endpointslices", kubeProxyUA)
		}()
		proxies = append(proxies, slices)
		watch(h.ProxyURL+"/api/v1/nodes?watch=true&allowWatchBookmarks=true&"+byName, kubeProxyUA)
		watch(h.ProxyURL+"/apis/networking.k8s.io/v1/servicecidrs?watch=true&allowWatchBookmarks=true", kubeProxyUA)
		wg.Add(1)
		go func() { // kubelet's node status loop reads its node, and its lease controller its lease
			defer wg.Done()
			tick := time.NewTicker(10 * time.Second)
			defer tick.Stop()
			for {
				_, _ = getAs(h.ProxyURL+"/api/v1/nodes/"+node, benchKubeletUA)
				_, _ = getAs(h.ProxyURL+"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/"+node, benchKubeletUA)
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
	time.Sleep(30*time.Second + time.Duration(n)*300*time.Millisecond) // the initial lists and watches
	purposes := []string{"proxied", "heartbeat", "pool", "own", "certs"}
	byPurpose := func() map[string]float64 {
		m := map[string]float64{}
		for _, h := range hubs {
			for _, p := range purposes {
				for _, d := range []string{"received", "sent"} {
					v, _ := h.Metric(`nodehub_cloud_bytes_total{purpose="` + p + `",direction="` + d + `"}`)
					m[p+" "+d] += v
				}
			}
			v, _ := h.Metric("nodehub_node_reads_from_watch_total")
			m["node reads"] += v
		}
		return m
	}
	req0, err := readAPIBytes(e)
	if err != nil {
		return err
	}
	down0, up0, p0 := relay.FromServer.Load(), relay.ToServer.Load(), byPurpose()
	time.Sleep(o.cloudIdle)
	down, up, p1 := relay.FromServer.Load()-down0, relay.ToServer.Load()-up0, byPurpose()
	req1, err := readAPIBytes(e)
	if err != nil {
		return err
	}
	day := float64(24*time.Hour) / float64(o.cloudIdle) / float64(n) / (1 << 20)
	fmt.Printf("cloud_idle_%s_%d_down\t%.1f MiB/day per node\t(cloud → edge; relay TCP payload over %v)\n", mode, n, float64(down)*day, o.cloudIdle)
	fmt.Printf("cloud_idle_%s_%d_up\t%.1f MiB/day per node\t(edge → cloud)\n", mode, n, float64(up)*day)
	var parts []string
	for _, p := range purposes {
		parts = append(parts, fmt.Sprintf("%s %.2f/%.2f", p, (p1[p+" received"]-p0[p+" received"])*day, (p1[p+" sent"]-p0[p+" sent"])*day))
	}
	fmt.Printf("cloud_idle_%s_%d_by_purpose\tMiB/day per node received/sent (bodies only): %s; kubelet node GETs answered from the watch: %.0f of %.0f\n",
		mode, n, strings.Join(parts, ", "), p1["node reads"]-p0["node reads"], float64(n)*o.cloudIdle.Seconds()/10)
	fmt.Printf("cloud_idle_%s_%d_by_request\tper node per day, as the apiserver counts (requests or events / KiB of their bodies): %s\n",
		mode, n, req1.perDay(req0, float64(24*time.Hour)/float64(o.cloudIdle)/float64(n)))

	// The return.
	api0, err := readAPICounts(e)
	if err != nil {
		return err
	}
	relisted := func() (gone, lists int64) {
		for _, r := range proxies {
			gone, lists = gone+r.gone.Load(), lists+r.lists.Load()
		}
		return gone, lists
	}
	gone0, lists0 := relisted()
	if err := relay.BlackHole(); err != nil {
		return err
	}
	tick := time.NewTicker(200 * time.Millisecond)
	for start := time.Now(); time.Since(start) < o.cloudCut; {
		<-tick.C
		if _, err := e.c.Admin.DiscoveryV1().EndpointSlices(ns).Update(ctx, profileSlice(e.nextGen()%o.cloudServices, e.gen), metav1.UpdateOptions{}); err != nil {
			fmt.Fprintln(os.Stderr, "cloud: update:", err)
		}
	}
	tick.Stop()
	api1, err := readAPICounts(e)
	if err != nil {
		return err
	}
	cpu := func() time.Duration {
		a, _ := cpuTime(e.c.APIServers[0].Proc.Pid())
		b, _ := cpuTime(e.c.Etcd.Pid())
		return a + b
	}
	cpu0, bytes0 := cpu(), relay.FromServer.Load()
	if err := relay.Pass(); err != nil {
		return err
	}
	back := time.Now()
	time.Sleep(3 * time.Second)
	mark := fmt.Sprintf("m%d", time.Now().UnixNano())
	patch := `{"metadata":{"labels":{"bench-mark":"` + mark + `"}}}`
	made := time.Now()
	if _, err := e.c.Admin.DiscoveryV1().EndpointSlices(ns).Patch(ctx, "svc-0007-x", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return err
	}
	var took time.Duration
	for {
		all := true
		for _, w := range proxies {
			all = all && w.has(mark)
		}
		if all {
			took = time.Since(made)
			break
		}
		if time.Since(made) > 2*time.Minute {
			return fmt.Errorf("the change made after the return did not reach every client in 2m")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(10 * time.Second) // what the return set off settles
	api2, err := readAPICounts(e)
	if err != nil {
		return err
	}
	var costs []string
	for _, r := range []string{"endpointslices", "services", "leases", "nodes", "pods", "servicecidrs"} {
		// api0→api1 is the cut: only the test's own requests; api1→api2 the return.
		costs = append(costs, fmt.Sprintf("%s %.0f/%.0f", r, startedSince(api1, api2, r, "LIST"), startedSince(api1, api2, r, "WATCH")))
	}
	_ = api0
	fmt.Printf("cloud_return_%s_%d\tLISTs/WATCHes the apiserver began in the return's first %v: %s\n", mode, n, time.Since(back).Round(time.Second), strings.Join(costs, ", "))
	fmt.Printf("cloud_return_%s_%d_cost\t%.2f MB sent by the apiserver, %.1f s apiserver+etcd CPU (same window); a change made 3 s after the return reached all %d kube-proxy-like clients %v after it was made\n",
		mode, n, float64(relay.FromServer.Load()-bytes0)/1e6, (cpu() - cpu0).Seconds(), n, took.Round(10*time.Millisecond))
	gone1, lists1 := relisted()
	fmt.Printf("cloud_return_%s_%d_410\t%d kube-proxy-like clients' EndpointSlice watches (list, then watch from its resourceVersion, as client-go) ended in 410 on the cut and return (of %d clients); they listed %d times\n",
		mode, n, gone1-gone0, n, lists1-lists0)
	cancel()
	wg.Wait()
	return nil
}

func url(s string) string { return strings.NewReplacer("=", "%3D", ",", "%2C", "!", "%21").Replace(s) }

// getAs sends one GET through the hub as ua, accepting protobuf, and drains the answer.
func getAs(u, ua string) (int, error) {
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set("User-Agent", ua)
	req.Header.Set("Accept", "application/vnd.kubernetes.protobuf,application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}
