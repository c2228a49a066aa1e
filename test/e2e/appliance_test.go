package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/cache"
	"nodehub/e2e/harness"
)

func TestSIGTERMStopsCleanlyAndFlushesTheCache(t *testing.T) {
	ctx := context.Background()
	ns := "sigterm"
	nodePods(t, ns, "last")
	// A long write-behind delay: the object is still in memory when the signal comes.
	h := startHub(t, "--cache-sync-interval=30s")
	kubelet := h.Client(kubeletUA, true)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	evs, _ := watchEvents(t, wctx, h, "/api/v1/pods?watch=true&fieldSelector=spec.nodeName%3D"+harness.NodeName, kubeletUA)
	if _, err := kubelet.CoreV1().Pods(ns).Get(ctx, "last", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(h.CacheDir, "kubelet/pods.v1.core", ns, "last")
	if _, _, err := cache.ReadFile(file); err == nil {
		t.Fatal("written before the delay passed: the test proves nothing")
	}
	start := time.Now()
	if err := h.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err, done := h.Wait(10 * time.Second)
	if !done {
		t.Fatal("nodehub did not exit within 10 s of SIGTERM")
	}
	var ee *exec.ExitError
	if err != nil && errors.As(err, &ee) {
		t.Fatalf("exit code %d after SIGTERM, want 0", ee.ExitCode())
	}
	t.Logf("stopped %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	for open := true; open; {
		select {
		case _, open = <-evs:
		case <-time.After(2 * time.Second):
			t.Fatal("a watch outlived the hub")
		}
	}
	if _, _, err := cache.ReadFile(file); err != nil {
		t.Fatalf("the pending object was not flushed on stop: %v", err)
	}
}

func TestMaxRequestsInFlightIsEnforced(t *testing.T) {
	relay, err := harness.NewRelay(strings.TrimPrefix(cluster.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Refuse()
	// No filters: their topology informer would be traffic of its own.
	h := startHubServers(t, relay.URL(), "--max-requests-in-flight=1", "--heartbeat-interval-seconds=30", "--enable-resource-filter=false")
	if err := relay.BlackHole(); err != nil {
		t.Fatal(err)
	}
	// A read nothing has cached waits on the black-holed link, holding the one slot.
	slow := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, h.ProxyURL+"/api/v1/namespaces/default/configmaps/held", nil)
		req.Header.Set("User-Agent", "probe/1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			slow <- 0
			return
		}
		resp.Body.Close()
		slow <- resp.StatusCode
	}()
	eventually(t, 60*time.Second, "the held request in flight", func() error {
		if v, _ := h.Metric("nodehub_inflight_requests"); v < 1 {
			return fmt.Errorf("in flight: %v", v)
		}
		return nil
	})
	cl := &http.Client{Timeout: 3 * time.Second}
	req, _ := http.NewRequest(http.MethodGet, h.ProxyURL+"/api/v1/namespaces/default/configmaps/second", nil)
	req.Header.Set("User-Agent", "probe/1")
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("second request: %s, Retry-After %q; want 429 with Retry-After", resp.Status, resp.Header.Get("Retry-After"))
	}
	if err := relay.Pass(); err != nil {
		t.Fatal(err)
	}
	relay.Refuse() // the held request fails over to an answer; the slot frees
	select {
	case <-slow:
	case <-time.After(10 * time.Second):
		t.Fatal("the held request never ended")
	}
	if v, _ := h.Metric(`nodehub_throttled_requests_total{budget="node"}`); v < 1 {
		t.Fatalf("throttled requests not counted: %v", v)
	}
}

func TestCacheMaxBytesKeepsServingAndReports(t *testing.T) {
	nodePods(t, "cache-max-bytes", "over-1", "over-2") // objects a full cache skips
	h := startHub(t, "--cache-max-bytes=1")
	pods := h.Client(kubeletUA, true)
	for i := 0; i < 2; i++ {
		if _, err := pods.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + harness.NodeName}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 60*time.Second, "skipped objects counted", func() error {
		if v, _ := h.Metric(`nodehub_cache_full_skipped_total{resource="pods"}`); v < 1 {
			return fmt.Errorf("skipped %v", v)
		}
		return nil
	})
	code, body, err := h.Get("/v1/readyz")
	if err != nil || code != 200 || !strings.Contains(body, "cache full") {
		t.Fatalf("readyz %d %q %v", code, body, err)
	}
}
