package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"nodehub/e2e/harness"
)

// The control plane and the nodehub binary every test shares.
var (
	cluster   *harness.Cluster
	nodehub   string
	clusterOK bool
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "nodehub-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if nodehub, err = harness.BuildNodehub(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	start := time.Now()
	if cluster, err = harness.StartCluster(ctx, dir, 2); err != nil {
		fmt.Fprintln(os.Stderr, "control plane:", err)
		return 1
	}
	defer cluster.Stop()
	fmt.Fprintf(os.Stderr, "control plane up in %v (etcd + %d kube-apiservers)\n", time.Since(start).Round(time.Millisecond), len(cluster.APIServers))
	return m.Run()
}

// startHub runs nodehub for one test and stops it when the test ends, printing its log on failure.
func startHub(t *testing.T, args ...string) *harness.Hub {
	t.Helper()
	return startHubServers(t, "", args...)
}

func startHubServers(t *testing.T, servers string, args ...string) *harness.Hub {
	t.Helper()
	return startHubIn(t, t.TempDir(), servers, args...)
}

// startHubIn runs nodehub with its files (cache, root, log) in dir, so a second hub can start
// where a first one stopped.
func startHubIn(t *testing.T, dir, servers string, args ...string) *harness.Hub {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := cluster.StartHub(ctx, harness.HubOptions{Bin: nodehub, Dir: dir, Servers: servers, Args: args})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Stop()
		if t.Failed() {
			t.Logf("nodehub log:\n%s", tailString(h.Log(), 6000))
		}
	})
	if err := h.WaitHTTP(ctx, "/v1/readyz", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	return h
}

func tailString(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// eventually polls f until it returns nil or d passes.
func eventually(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v: %v", what, d, err)
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// cacheWritten waits until everything h teed into its cache so far is in the cache's files.
func cacheWritten(t *testing.T, h *harness.Hub) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := h.CacheWritten(ctx); err != nil {
		t.Fatal(err)
	}
}
