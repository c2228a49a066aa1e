package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/e2e/harness"
)

// defaultHealthFlags undoes the harness's fast heartbeat: these tests hold nodehub to its targets at
// the default flags (heartbeat every 10 s, timeout 2 s, 3 failures, 2 successes).
var defaultHealthFlags = []string{"--heartbeat-interval-seconds=10", "--heartbeat-timeout-seconds=2",
	"--heartbeat-failed-retry=3", "--heartbeat-healthy-threshold=2"}

// healthGaugeWithin polls the hub's health gauge of server addr every 10 ms until it reads want and
// returns how long that took (-1 when it did not within d).
func healthGaugeWithin(h *harness.Hub, addr string, want float64, d time.Duration) time.Duration {
	start := time.Now()
	for time.Since(start) < d {
		if v, err := h.Metric(`nodehub_server_healthy{server="` + addr + `"}`); err == nil && v == want {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return -1
}

// watchClosedWithin waits until a watch's event channel closes and returns when it did (zero time: not
// within d).
func watchClosedWithin(evs <-chan map[string]any, d time.Duration) time.Time {
	deadline := time.After(d)
	for {
		select {
		case _, ok := <-evs:
			if !ok {
				return time.Now()
			}
		case <-deadline:
			return time.Time{}
		}
	}
}

// nodeReader is the node's clients at work: kubelet reading its Node every 100 ms through the hub.
func nodeReader(t *testing.T, ctx context.Context, h *harness.Hub) {
	cl := &http.Client{Timeout: 10 * time.Second}
	go func() {
		for ctx.Err() == nil {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.ProxyURL+"/api/v1/nodes/"+harness.NodeName, nil)
			req.Header.Set("User-Agent", kubeletUA)
			if resp, err := cl.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

// Issue 13, part 3: at the default flags, with the link black-holed and restored again and again
// while the node's clients are at work, every outage is noticed within 3 s, every return within
// 2 s; watches proxied to the cloud end when the outage is noticed, offline watches within 2 s of
// the return, and the clients then read what changed in the cloud meanwhile.
//
// Those figures are measured by bench (health phase), on a machine that is not also running other
// builds. Here the bounds are what the design gives plus slack for two loaded cores, still short of
// what the fallbacks would take: an outage noticed by the 10 s heartbeat and its retries (the first
// after 4 s at best, 15 s at worst), a return by the heartbeat (10 s), watches ended by their own
// timeouts (minutes).
func TestHealthFollowsTheLink(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := "health"
	if err := cluster.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	relay, err := harness.NewRelay(strings.TrimPrefix(cluster.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Refuse()
	h := startHubServers(t, relay.URL(), defaultHealthFlags...)
	if d := healthGaugeWithin(h, relay.Addr, 1, 30*time.Second); d < 0 {
		t.Fatal("never healthy")
	}
	kubelet := h.Client(kubeletUA, true)
	nodeSel := metav1.ListOptions{FieldSelector: "spec.nodeName=" + harness.NodeName}
	podNames(t, kubelet, "", nodeSel) // cached from now on
	if _, err := kubelet.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	nodeReader(t, ctx, h)
	watchPath := "/api/v1/pods?watch=true&allowWatchBookmarks=true&fieldSelector=spec.nodeName%3D" + harness.NodeName
	for cycle, pause := range []time.Duration{3 * time.Second, 6500 * time.Millisecond, 4200 * time.Millisecond, 8 * time.Second} {
		time.Sleep(pause) // the cuts fall at different points of the heartbeat's 10 s
		wctx, wcancel := context.WithCancel(ctx)
		online, _ := watchEvents(t, wctx, h, watchPath, kubeletUA)

		if err := relay.BlackHole(); err != nil {
			t.Fatal(err)
		}
		down := healthGaugeWithin(h, relay.Addr, 0, 10*time.Second)
		noticed := time.Now()
		if down < 0 || down > 4*time.Second {
			t.Fatalf("cycle %d: outage noticed after %v (want ≤ 3 s, ≤ 4 s on a loaded machine)", cycle, down)
		}
		if end := watchClosedWithin(online, 5*time.Second); end.IsZero() {
			t.Fatalf("cycle %d: a watch proxied to the cloud stayed open after the outage was noticed", cycle)
		} else if d := end.Sub(noticed); d > 3*time.Second {
			t.Fatalf("cycle %d: proxied watch ended %v after the outage was noticed", cycle, d)
		}
		offline, _ := watchEvents(t, wctx, h, watchPath, kubeletUA)
		name := fmt.Sprintf("health-%d", cycle)
		if _, err := cluster.Admin.CoreV1().Pods(ns).Create(ctx, newPod(ns, name), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		time.Sleep(2*time.Second + time.Duration(cycle)*290*time.Millisecond) // returns at different points of the 1 s probes

		if err := relay.Pass(); err != nil {
			t.Fatal(err)
		}
		back := time.Now()
		up := healthGaugeWithin(h, relay.Addr, 1, 10*time.Second)
		if up < 0 || up > 5*time.Second {
			t.Fatalf("cycle %d: return noticed after %v (want ≤ 2 s, ≤ 5 s on a loaded machine)", cycle, up)
		}
		end := watchClosedWithin(offline, 10*time.Second)
		if end.IsZero() || end.Sub(back) > 6*time.Second {
			t.Fatalf("cycle %d: offline watch still open 6 s after the return", cycle)
		}
		// Clients re-list from the cloud: the pod created during the outage is there, and a new
		// watch gets the cloud's events.
		if got := podNames(t, kubelet, "", nodeSel); !contains(got, ns+"/"+name) {
			t.Fatalf("cycle %d: list after the return misses %s: %v", cycle, name, got)
		}
		evs, _ := watchEvents(t, wctx, h, watchPath, kubeletUA)
		if err := cluster.Admin.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
			t.Fatal(err)
		}
		if !watchSawObject(evs, name, 5*time.Second) {
			t.Fatalf("cycle %d: a watch opened after the return got no event from the cloud", cycle)
		}
		wcancel()
		t.Logf("cycle %d: outage noticed after %v, return after %v, offline watch ended %v after the return",
			cycle, down.Round(time.Millisecond), up.Round(time.Millisecond), end.Sub(back).Round(time.Millisecond))
	}
}

// watchSawObject reports whether a watch delivers an event about the named object within d.
func watchSawObject(evs <-chan map[string]any, name string, d time.Duration) bool {
	deadline := time.After(d)
	for {
		select {
		case ev, ok := <-evs:
			if !ok {
				return false
			}
			obj, _ := ev["object"].(map[string]any)
			md, _ := obj["metadata"].(map[string]any)
			if md["name"] == name {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

// Issue 13, part 3: a hub that starts with a cache while the link is black-holed answers its first
// cached read within 0.2 s of its start (nothing proved the cloud reachable: it does not wait out
// the probe's timeout); a write still goes to the cloud first and is answered once the first
// probe failed; and the cloud's return is noticed within 2 s.
//
// The figures are bench's (health phase). Here: the first answer comes before the first probe's
// verdict (the hub has not logged the server unhealthy yet), however long a loaded machine takes
// to start the process; the write and the return within bounds that slack for two loaded cores
// but are short of the fallbacks (a write left to its own timeout, a return seen by the 10 s
// heartbeat).
func TestColdStartInBlackHole(t *testing.T) {
	ctx := context.Background()
	nodePods(t, "health-cold", "cold-a") // a pod the first cached answer must hold
	relay, err := harness.NewRelay(strings.TrimPrefix(cluster.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Refuse()
	dir := t.TempDir()
	h := startHubIn(t, dir, relay.URL(), defaultHealthFlags...)
	kubelet := h.Client(kubeletUA, true)
	nodeSel := metav1.ListOptions{FieldSelector: "spec.nodeName=" + harness.NodeName}
	online := podNames(t, kubelet, "", nodeSel)
	if _, err := kubelet.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	cacheWritten(t, h)
	h.Stop()

	if err := relay.BlackHole(); err != nil {
		t.Fatal(err)
	}
	list := h.ProxyURL + "/api/v1/pods?fieldSelector=spec.nodeName%3D" + harness.NodeName
	start := time.Now()
	h2, err := cluster.StartHub(ctx, harness.HubOptions{Bin: nodehub, Dir: dir, Servers: relay.URL(), NoWait: true, Args: defaultHealthFlags})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		h2.Stop()
		if t.Failed() {
			t.Logf("nodehub log:\n%s", tailString(h2.Log(), 6000))
		}
	}()
	list = strings.Replace(list, h.ProxyURL, h2.ProxyURL, 1)
	cl := &http.Client{Timeout: 5 * time.Second}
	var first time.Duration
	for time.Since(start) < 30*time.Second {
		req, _ := http.NewRequest(http.MethodGet, list, nil)
		req.Header.Set("User-Agent", kubeletUA)
		req.Header.Set("Accept", "application/json")
		resp, err := cl.Do(req)
		if err != nil {
			time.Sleep(2 * time.Millisecond) // not listening yet
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("first read: %s %s", resp.Status, body)
		}
		first = time.Since(start)
		if strings.Contains(h2.Log(), "cloud server unhealthy") {
			t.Fatalf("the first cached answer (%v after exec) came after the first probe's verdict:\n%s", first, tailString(h2.Log(), 3000))
		}
		for _, p := range online {
			if !strings.Contains(string(body), `"name":"`+strings.SplitN(p, "/", 2)[1]+`"`) {
				t.Fatalf("first read misses %s: %s", p, body)
			}
		}
		break
	}
	if first == 0 {
		t.Fatal("no cached answer within 30 s of the start")
	}
	t.Logf("black hole at start: first cached answer %v after exec", first.Round(time.Millisecond))

	// A write is tried on the cloud (nothing proved it unreachable either), and answered once the
	// first probe failed: from the local copy, or 503 — never left hanging.
	kubelet2 := h2.Client(kubeletUA, true)
	wstart := time.Now()
	_, err = kubelet2.CoreV1().Nodes().Patch(ctx, harness.NodeName, "application/strategic-merge-patch+json",
		[]byte(`{"status":{"conditions":[{"type":"ColdStart","status":"True","reason":"BlackHole"}]}}`), metav1.PatchOptions{}, "status")
	if d := time.Since(wstart); d > 10*time.Second {
		t.Fatalf("write on a black-holed cold start answered after %v (%v)", d, err)
	} else {
		t.Logf("write on a black-holed cold start: %v after %v", err, d.Round(time.Millisecond))
	}
	if err := relay.Pass(); err != nil {
		t.Fatal(err)
	}
	if up := healthGaugeWithin(h2, relay.Addr, 1, 10*time.Second); up < 0 || up > 5*time.Second {
		t.Fatalf("return after a cold start noticed after %v (want ≤ 2 s, ≤ 5 s on a loaded machine)", up)
	}
}

// Issue 14: a pod's read that is slow by nature (a list at a resourceVersion the apiserver has
// not reached: it waits 3 s for it), sent with timeoutSeconds=1, is answered from the pod's own
// cache; it never marks the server unhealthy and never ends the node's other watches.
func TestSlowPodReadKeepsNodeOnline(t *testing.T) {
	ctx := context.Background()
	ns := "health-slow"
	tokens := saSetup(t, ns, "slow")
	if _, err := cluster.Admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	h := startHubServers(t, cluster.APIServers[0].URL, defaultHealthFlags...) // one server: nowhere else to go
	addr := strings.TrimPrefix(cluster.APIServers[0].URL, "https://")
	if healthGaugeWithin(h, addr, 1, 30*time.Second) < 0 {
		t.Fatal("never healthy")
	}
	get := func(query string) (int, string, time.Duration) {
		req, _ := http.NewRequest(http.MethodGet, h.ProxyURL+"/api/v1/namespaces/"+ns+"/configmaps"+query, nil)
		req.Header.Set("Authorization", "Bearer "+tokens["slow"])
		req.Header.Set("User-Agent", "coredns/e2e")
		req.Header.Set("Accept", "application/json")
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(body), time.Since(start)
	}
	code, body, _ := get("")
	if code != 200 {
		t.Fatalf("pod's list: %d %s", code, body)
	}
	rv := strings.SplitN(strings.SplitN(body, `"resourceVersion":"`, 2)[1], `"`, 2)[0]
	n, _ := strconv.ParseInt(rv, 10, 64)
	future := strconv.FormatInt(n+1000000, 10)
	cacheWritten(t, h)

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watch, _ := watchEvents(t, wctx, h, "/api/v1/pods?watch=true&fieldSelector=spec.nodeName%3D"+harness.NodeName, kubeletUA)
	var unhealthy atomic.Bool
	go func() {
		for wctx.Err() == nil {
			if v, err := h.Metric(`nodehub_server_healthy{server="` + addr + `"}`); err == nil && v != 1 {
				unhealthy.Store(true)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	for i := 0; i < 4; i++ {
		code, body, d := get("?resourceVersion=" + future + "&resourceVersionMatch=NotOlderThan&timeoutSeconds=1")
		if code != 200 || !strings.Contains(body, `"name":"cfg"`) {
			t.Fatalf("slow read %d: %d after %v: %s", i, code, d, body)
		}
		t.Logf("slow read %d answered from the pod's cache after %v", i, d.Round(time.Millisecond))
	}
	time.Sleep(3 * time.Second) // any probe the slow reads asked for has answered
	for drained := false; !drained; {
		select {
		case _, ok := <-watch:
			if !ok {
				t.Fatal("the node's watch ended because of a pod's slow read")
			}
		default:
			drained = true
		}
	}
	if unhealthy.Load() {
		t.Fatal("a pod's slow read marked the server unhealthy")
	}
	if strings.Contains(h.Log(), "cloud server unhealthy") {
		t.Fatal("hub logged the server unhealthy")
	}
}
