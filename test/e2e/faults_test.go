package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"nodehub/e2e/harness"
)

// flapRun is how long the link flaps: 10 minutes, as the issue asks (NODEHUB_FLAP_MINUTES
// shortens it for a local run). The test runs in parallel with the suite's other parallel tests.
const flapRun = 10 * time.Minute

// flapDown and flapUp are one cycle of the link: black-holed, then passing.
const flapDown, flapUp = 4 * time.Second, 5 * time.Second

// The link to the cloud flaps (black-holed a few seconds, back a few seconds) for flapRun while
// clients keep watches open through nodehub and the cloud changes a ConfigMap every second: no
// answer is lost (every GET gets the object, from the cloud or the cache) or wrong (every value
// seen is one the cloud held; within a watch resourceVersions only grow), the clients see the
// latest value once the link stays up, and nodehub's goroutines, file descriptors and RSS do not
// grow across the run (printed every minute).
func TestFaultsLinkFlapping(t *testing.T) {
	t.Parallel()
	run := flapRun
	if m, err := strconv.Atoi(os.Getenv("NODEHUB_FLAP_MINUTES")); err == nil && m > 0 {
		run = time.Duration(m) * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), run+3*time.Minute)
	defer cancel()
	const ns = "faults"
	if err := cluster.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "counter", Namespace: ns}, Data: map[string]string{"n": "0"}}
	if _, err := cluster.Admin.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "exists") {
		t.Fatal(err)
	}
	bindNodes(t, "e2e-faults-configmaps", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}})
	relay, err := harness.NewRelay(strings.TrimPrefix(cluster.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	h := startHubServers(t, relay.URL(), "--profiling")
	pid := h.Pid()

	// The cloud's side: the counter goes up every second; latest is set before n is written (no
	// answer may be newer), stored once the cloud took it (the value clients must reach). A stop
	// comes between two writes, never in the middle of one.
	var latest, stored atomic.Int64
	churnCtx, stopChurn := context.WithCancel(ctx)
	var churnDone sync.WaitGroup
	churnDone.Add(1)
	defer func() { stopChurn(); churnDone.Wait() }()
	go func() {
		defer churnDone.Done()
		for n := int64(1); churnCtx.Err() == nil; n++ {
			latest.Store(n)
			patch := fmt.Sprintf(`{"data":{"n":"%d"}}`, n)
			if _, err := cluster.Admin.CoreV1().ConfigMaps(ns).Patch(ctx, "counter", "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Logf("churn: %v", err)
			} else {
				stored.Store(n)
			}
			select {
			case <-churnCtx.Done():
			case <-time.After(time.Second):
			}
		}
	}()

	var wrong atomic.Int64 // answers with a value the cloud never held, or a resourceVersion going back
	check := func(what string, c *corev1.ConfigMap) int64 {
		n, err := strconv.ParseInt(c.Data["n"], 10, 64)
		if err != nil || n < 0 || n > latest.Load() {
			wrong.Add(1)
			t.Errorf("%s: counter %q (the cloud is at %d)", what, c.Data["n"], latest.Load())
		}
		return n
	}

	// Clients: two list+watch loops (as a reflector: re-list when the watch ends) and a GET loop.
	clientsCtx, stopClients := context.WithCancel(ctx)
	var clients sync.WaitGroup
	seen := make([]atomic.Int64, 2)
	var relists atomic.Int64
	defer func() { stopClients(); clients.Wait() }()
	for i, ua := range []string{"coredns", "kube-proxy"} {
		clients.Add(1)
		go func() {
			defer clients.Done()
			c := h.Client(ua, i == 1)
			for clientsCtx.Err() == nil {
				reflect(clientsCtx, c, ns, func(cm *corev1.ConfigMap) { seen[i].Store(check(ua, cm)) }, &wrong, t)
				relists.Add(1)
				select {
				case <-clientsCtx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			}
		}()
	}
	var gets, lost atomic.Int64
	clients.Add(1)
	go func() {
		defer clients.Done()
		c := h.Client("kubelet", true)
		for clientsCtx.Err() == nil {
			gctx, cancel := context.WithTimeout(clientsCtx, 20*time.Second)
			got, err := c.CoreV1().ConfigMaps(ns).Get(gctx, "counter", metav1.GetOptions{})
			cancel()
			if clientsCtx.Err() != nil {
				return
			}
			gets.Add(1)
			if err != nil {
				lost.Add(1)
				t.Logf("GET lost: %v", err)
			} else {
				check("GET", got)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()

	// The link flaps; the figures are sampled every minute, the first after a minute of flapping
	// (the hub's steady state with its watches, caches and connections open).
	type sample struct {
		at                     time.Duration
		goroutines, fds, rssKB int
	}
	var samples []sample
	take := func(at time.Duration) sample {
		s := sample{at: at.Round(time.Second), goroutines: goroutines(h), fds: openFDs(pid), rssKB: procStatus(pid, "VmRSS")}
		samples = append(samples, s)
		t.Logf("at %v: %d goroutines, %d fds, RSS %.1f MiB; %d GETs (%d lost), %d relists, counter %d, clients at %d/%d",
			s.at, s.goroutines, s.fds, float64(s.rssKB)/1024, gets.Load(), lost.Load(), relists.Load(), latest.Load(), seen[0].Load(), seen[1].Load())
		return s
	}
	// Warm up with the link up: every client has the object, and the cache has written it.
	eventually(t, 30*time.Second, "clients have the counter", func() error {
		if seen[0].Load() == 0 || seen[1].Load() == 0 || gets.Load() == 0 || lost.Load() > 0 {
			return fmt.Errorf("clients at %d/%d, %d GETs (%d lost)", seen[0].Load(), seen[1].Load(), gets.Load(), lost.Load())
		}
		return nil
	})
	time.Sleep(3 * time.Second)
	start := time.Now()
	next := time.Minute
	cycles := 0
	for time.Since(start) < run {
		if err := relay.BlackHole(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(flapDown)
		if err := relay.Pass(); err != nil {
			t.Fatal(err)
		}
		cycles++
		time.Sleep(flapUp)
		if time.Since(start) >= next {
			take(time.Since(start))
			next += time.Minute
		}
	}
	// The link stays up: the clients catch up with the cloud.
	stopChurn()
	churnDone.Wait()
	final := stored.Load()
	eventually(t, 60*time.Second, "clients at the cloud's last value", func() error {
		if seen[0].Load() != final || seen[1].Load() != final {
			return fmt.Errorf("clients at %d/%d, the cloud at %d", seen[0].Load(), seen[1].Load(), final)
		}
		return nil
	})
	// The last cycle's connections and timers go in their time, a loaded machine's time: the
	// figures are sampled until they are back within the bounds (a leak never is).
	if len(samples) < 1 {
		t.Fatal("no sample during the run")
	}
	first := samples[0]
	grown := func(s sample) bool {
		return s.goroutines > first.goroutines+20 || s.fds > first.fds+10 || s.rssKB > first.rssKB+8<<10
	}
	var end sample
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(5 * time.Second) {
		if end = take(time.Since(start)); !grown(end) || time.Now().After(deadline) {
			break
		}
	}
	stopClients()
	clients.Wait()
	t.Logf("%d flap cycles (%v black hole, %v up) over %v: %d GETs, %d lost, %d wrong answers, %d relists",
		cycles, flapDown, flapUp, run, gets.Load(), lost.Load(), wrong.Load(), relists.Load())
	if !h.Running() {
		t.Fatal("nodehub exited")
	}
	if lost.Load() > 0 || wrong.Load() > 0 {
		t.Fatalf("%d GETs lost, %d wrong answers", lost.Load(), wrong.Load())
	}
	if len(samples) < 2 {
		t.Fatal("fewer than two samples")
	}
	if grown(end) {
		t.Fatalf("growth across the run: goroutines %d → %d, fds %d → %d, RSS %d → %d KiB",
			first.goroutines, end.goroutines, first.fds, end.fds, first.rssKB, end.rssKB)
	}
}

// reflect lists the namespace's ConfigMaps and watches from the list's resourceVersion until the
// watch ends, as client-go's reflector does, calling seen for the counter each time.
func reflect(ctx context.Context, c *kubernetes.Clientset, ns string, seen func(*corev1.ConfigMap), wrong *atomic.Int64, t *testing.T) {
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	list, err := c.CoreV1().ConfigMaps(ns).List(lctx, metav1.ListOptions{})
	cancel()
	if err != nil {
		return
	}
	for i := range list.Items {
		if list.Items[i].Name == "counter" {
			seen(&list.Items[i])
		}
	}
	w, err := c.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, AllowWatchBookmarks: true})
	if err != nil {
		return
	}
	defer w.Stop()
	last := int64(0)
	for ev := range w.ResultChan() {
		cm, ok := ev.Object.(*corev1.ConfigMap)
		if !ok || ev.Type == watch.Error {
			return
		}
		rv, _ := strconv.ParseInt(cm.ResourceVersion, 10, 64)
		if rv < last {
			wrong.Add(1)
			t.Errorf("a watch went back from resourceVersion %d to %d", last, rv)
		}
		last = rv
		if ev.Type != watch.Bookmark && cm.Name == "counter" {
			seen(cm)
		}
	}
}

// goroutines reads the hub's goroutine count from /debug/pprof (--profiling).
func goroutines(h *harness.Hub) int {
	resp, err := http.Get(h.HubURL + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	var n int
	if _, err := fmt.Sscanf(string(b), "goroutine profile: total %d", &n); err != nil {
		return -1
	}
	return n
}
