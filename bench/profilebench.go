package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"nodehub/e2e/harness"
)

// benchProfile is the "node profile": 110 pods on the node, 1,000 Services with one 10-endpoint
// EndpointSlice each, kubelet-, kube-proxy- and coredns-like clients list/watching through the
// hub, then 10 EndpointSlice updates per second for a minute. It prints RSS after the initial
// lists and at the end, the hub's CPU seconds and flash writes during the minute.
func benchProfile(e *env, o options) error {
	ctx := e.ctx
	if err := e.c.BindNodes(ctx, "bench-profile", rbacv1.PolicyRule{APIGroups: []string{"", "discovery.k8s.io"},
		Resources: []string{"services", "endpointslices", "namespaces"}, Verbs: []string{"get", "list", "watch"}}); err != nil {
		return err
	}
	ns := "profile"
	if err := e.c.EnsureNamespace(ctx, ns); err != nil {
		return err
	}
	if err := makeServices(ctx, e.c, ns, o.services); err != nil {
		return err
	}
	var args []string
	sharing := "the node-level shared store holds the 2,000 Services and slices, cached once as the hub's own"
	if !o.profileSharing {
		args = append(args, "--pool-scope-resources=")
		sharing = "no shared store: kube-proxy and coredns each list and watch the cloud, and the cache stores the bytes they both read once"
	}
	heapDir := os.Getenv("BENCH_HEAP_DIR") // heap profiles of the hub (then run with --profiling) at each stage
	if heapDir != "" {
		args = append(args, "--profiling")
	}
	h, err := e.startHub(args...)
	if err != nil {
		return err
	}
	defer h.Stop()
	saveHeap := func(stage string) {
		if heapDir != "" {
			if smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", h.Pid())); err == nil {
				_ = os.WriteFile(filepath.Join(heapDir, "smaps-"+stage+".txt"), smaps, 0o644)
			}
			if err := saveHeapProfile(h.HubURL, filepath.Join(heapDir, "heap-"+stage+".pb.gz")); err != nil {
				fmt.Fprintln(os.Stderr, "heap profile:", err)
			}
			if err := saveHeapProfile(h.HubURL, filepath.Join(heapDir, "heap-"+stage+".txt")); err != nil {
				fmt.Fprintln(os.Stderr, "heap profile:", err)
			}
		}
	}
	disk, err := realDisk(h.CacheDir)
	if err != nil {
		return err
	}
	time.Sleep(o.idle / 2)
	idle60, _ := rssKiB(h)
	idleCPU0, _ := cpuTime(h.Pid())
	time.Sleep(o.idle / 2)
	idle, _ := rssKiB(h)
	idleCPU1, _ := cpuTime(h.Pid())
	idleSplit := rssSplit(h)
	startPeak, _ := procStatusKiB(h.Pid(), "VmHWM") // the start-up peak: the stores' first lists, before any client
	saveHeap("idle")

	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	lists, err := profileLists(wctx, h, &wg, o.profileInitialEvents)
	if err != nil {
		return err
	}
	time.Sleep(6 * time.Second) // the hub gives back a burst's free heap within 5 s
	listed, _ := rssKiB(h)
	listedSplit := rssSplit(h)
	saveHeap("listed")

	slow, err := churnPhase(e, h, ns, o.services, 10, o.profile, 0)
	if err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	fast, err := churnPhase(e, h, ns, o.services, 100, o.profile100, slow.updates)
	if err != nil {
		return err
	}
	end, _ := rssKiB(h)
	saveHeap("end")
	if os.Getenv("BENCH_DUMP") != "" { // the hub's goroutines, for a look (SIGQUIT)
		_ = h.Signal(syscall.SIGQUIT)
		time.Sleep(time.Second)
	}
	stop()
	wg.Wait()
	if log, err := os.ReadFile(filepath.Join(filepath.Dir(h.CacheDir), "nodehub.log")); err == nil {
		_ = os.WriteFile(filepath.Join(os.TempDir(), "nodehub-bench-profile.log"), log, 0o644)
	}

	w := fmt.Sprintf("node profile: 110 pods, %d Services with a 10-endpoint EndpointSlice each, kubelet/kube-proxy/coredns-like list+watch (protobuf), updates of distinct EndpointSlices; %s; cache on %s", o.services, sharing, disk)
	fmt.Printf("\n## %s\n", w)
	// Not the idle goal's hub (-only idle: a plain hub): this one's shared store already holds the
	// 2,000 Services and slices.
	fmt.Printf("rss_before_clients_%v\t%.1f MiB\t\t(release build; the shared store holds the 2,000 objects; the idle goal is -only idle's)\n", o.idle/2, float64(idle60)/1024)
	fmt.Printf("rss_before_clients_%v\t%.1f MiB\t\t%s\n", o.idle, float64(idle)/1024, idleSplit)
	fmt.Printf("cpu_idle_per_minute\t%.3f s\t\t(the hub's CPU time over the second half of the idle period, per minute)\n", (idleCPU1-idleCPU0).Seconds()*float64(time.Minute)/float64(o.idle/2))
	fmt.Printf("rss_startup_peak\t%.1f MiB\tgoal ≤ 24 MiB\t(VmHWM before any client: start, the shared stores' first lists of the 2,000 objects, caching them)\n", float64(startPeak)/1024)
	lists.print("")
	fmt.Printf("rss_after_initial_lists\t%.1f MiB\tgoal ≤ 16 MiB\t%s\n", float64(listed)/1024, listedSplit)
	for _, ph := range []churnFigures{slow, fast} {
		ph.print()
	}
	fmt.Printf("rss_at_end\t%.1f MiB\n", float64(end)/1024)
	h.Stop()
	for _, limit := range strings.Split(o.limits, ",") {
		if limit = strings.TrimSpace(limit); limit == "" {
			continue
		}
		if err := profileListsUnderLimit(e, limit); err != nil {
			return err
		}
	}
	return nil
}

func containsByte(s string, c byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return true
		}
	}
	return false
}

func profileSlice(i, gen int) *discoveryv1.EndpointSlice {
	s := endpointSlice(i, gen)
	s.Name = fmt.Sprintf("svc-%04d-x", i)
	s.Labels = map[string]string{discoveryv1.LabelServiceName: fmt.Sprintf("svc-%04d", i)}
	// Every generation moves the endpoints somewhere new (endpointSlice's addresses repeat every
	// 250 generations, so a slice's second update in a 1,000-slice profile would be a no-op the
	// apiserver sends no event for).
	for j := range s.Endpoints {
		s.Endpoints[j].Addresses = []string{fmt.Sprintf("10.%d.%d.%d", 100+gen%100, (gen/100)%250, j+1)}
	}
	return s
}

// servicesFixture lets every node read by rules (a ClusterRole each, by name) and makes the
// namespace ns with n Services and their slices (makeServices).
func servicesFixture(e *env, ns string, n int, rules map[string]rbacv1.PolicyRule) error {
	for name, rule := range rules {
		if err := e.c.BindNodes(e.ctx, name, rule); err != nil {
			return err
		}
	}
	if err := e.c.EnsureNamespace(e.ctx, ns); err != nil {
		return err
	}
	return makeServices(e.ctx, e.c, ns, n)
}

func makeServices(ctx context.Context, c *harness.Cluster, ns string, n int) error {
	return parallel(n, func(i int) error {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc-%04d", i)},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt(8080)}}}}
		if _, err := c.Admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); ignoreExists(err) != nil {
			return err
		}
		_, err := c.Admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, profileSlice(i, 0), metav1.CreateOptions{})
		return ignoreExists(err)
	})
}

// listsFigures are what the node profile's initial lists and watches cost.
type listsFigures struct {
	peakKiB   int64
	peakSplit string
	took, cpu time.Duration
}

func (f listsFigures) print(label string) {
	goal := ""
	if label == "" {
		goal = "goal ≤ 20 MiB\t"
	}
	fmt.Printf("rss_peak_during_initial_lists%s\t%.1f MiB\t%s(sampled every 50 ms) %s\n", label, float64(f.peakKiB)/1024, goal, f.peakSplit)
	fmt.Printf("initial_lists_and_watches%s\t%.1f s\t(hub CPU %.2f s, until the cache settled)\n", label, f.took.Seconds(), f.cpu.Seconds())
}

// profileLists runs the node profile's clients: each lists, then watches from the list's resourceVersion until ctx ends (wg
// tracks the watches). It returns once the hub's cache has settled.
func profileLists(ctx context.Context, h *harness.Hub, wg *sync.WaitGroup, initialEvents bool) (listsFigures, error) {
	clients := []struct{ ua, path string }{
		{kubeletUA, "/api/v1/pods?fieldSelector=spec.nodeName%3D" + harness.NodeName},
		{kubeletUA, "/api/v1/nodes?fieldSelector=metadata.name%3D" + harness.NodeName},
		{kubeletUA, "/api/v1/services"},
		{kubeProxyUA, "/api/v1/services"},
		{kubeProxyUA, "/apis/discovery.k8s.io/v1/endpointslices"},
		{"coredns/1.11.1 (linux/arm64) kubernetes/bench", "/api/v1/services"},
		{"coredns/1.11.1 (linux/arm64) kubernetes/bench", "/apis/discovery.k8s.io/v1/endpointslices"},
		{"coredns/1.11.1 (linux/arm64) kubernetes/bench", "/api/v1/namespaces"},
	}
	peak := sampleRSS(h)
	split := samplePeakSplit(h)
	cpu0, _ := cpuTime(h.Pid())
	start := time.Now()
	for _, c := range clients {
		// As client-go's reflector does: list, then watch from the list's resourceVersion.
		rv, err := listRV(h.ProxyURL+c.path, c.ua)
		if err != nil {
			peak()
			split()
			return listsFigures{}, err
		}
		if initialEvents {
			rv = "" // every object again, as ADDED events
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sep := "?"
			if containsByte(c.path, '?') {
				sep = "&"
			}
			_ = watchStream(ctx, h.ProxyURL+c.path+sep+"watch=true&allowWatchBookmarks=true&resourceVersion="+rv, c.ua)
		}()
	}
	settle(h)
	f := listsFigures{took: time.Since(start)}
	cpu1, _ := cpuTime(h.Pid())
	f.cpu = cpu1 - cpu0
	f.peakKiB = peak()
	f.peakSplit = split()
	return f, nil
}

// profileListsUnderLimit runs only the initial lists and watches on a fresh hub started with
// --memory-limit: what the limit does to the burst's peak and CPU.
func profileListsUnderLimit(e *env, limit string) error {
	h, err := e.startHub("--memory-limit=" + limit)
	if err != nil {
		return err
	}
	defer h.Stop()
	time.Sleep(20 * time.Second) // start-up settled
	ctx, stop := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	f, err := profileLists(ctx, h, &wg, false)
	stop()
	wg.Wait()
	if err != nil {
		return err
	}
	f.print("_memory_limit_" + limit)
	return nil
}

// listRV lists in protobuf as a client does and returns the list's resourceVersion.
func listRV(url, ua string) (string, error) {
	body, err := getBody(url, ua)
	if err != nil {
		return "", err
	}
	var u runtime.Unknown
	if len(body) < 4 || string(body[:4]) != "k8s\x00" {
		return "", fmt.Errorf("%s: not a protobuf list", url)
	}
	if err := u.Unmarshal(body[4:]); err != nil {
		return "", fmt.Errorf("%s: %w", url, err)
	}
	var l metav1.List // every List has ListMeta as field 1 and its items as field 2
	if err := l.Unmarshal(u.Raw); err != nil {
		return "", fmt.Errorf("%s: %w", url, err)
	}
	return l.ResourceVersion, nil
}
