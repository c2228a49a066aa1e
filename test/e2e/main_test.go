package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/e2e/harness"
)

// The control plane and the nodehub binary every test shares.
var (
	cluster   *harness.Cluster
	nodehub   string
	clusterOK bool
	// others are the control planes of the other releases, started by the first test that needs
	// one (clusterAt) and stopped after the last.
	others = struct {
		sync.Mutex
		dir string
		m   map[string]*harness.Cluster
	}{m: map[string]*harness.Cluster{}}
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
	others.dir = dir
	defer func() {
		for _, c := range others.m {
			c.Stop()
		}
	}()
	fmt.Fprintf(os.Stderr, "control plane %s up in %v (etcd + %d kube-apiservers)\n", cluster.Version, time.Since(start).Round(time.Millisecond), len(cluster.APIServers))
	return m.Run()
}

// clusterAt returns the control plane of release r: the shared one when it is of r, else one of
// its own (etcd and one kube-apiserver), started at the first call for r and shared by the tests
// after it like the first.
func clusterAt(t *testing.T, r harness.Release) *harness.Cluster {
	t.Helper()
	if cluster.Release.Name == r.Name {
		return cluster
	}
	others.Lock()
	defer others.Unlock()
	if c := others.m[r.Name]; c != nil {
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	dir := filepath.Join(others.dir, "cluster-"+r.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := harness.StartClusterAt(ctx, r, dir, 1)
	if err != nil {
		t.Fatalf("control plane %s: %v", r.Name, err)
	}
	others.m[r.Name] = c
	t.Logf("control plane %s up in %v (etcd + 1 kube-apiserver)", c.Version, time.Since(start).Round(time.Millisecond))
	return c
}

// eachRelease runs f as a subtest per Kubernetes release of the harness, on that release's
// control plane.
func eachRelease(t *testing.T, f func(t *testing.T, c *harness.Cluster)) {
	for _, r := range harness.Releases() {
		t.Run(r.Name, func(t *testing.T) { f(t, clusterAt(t, r)) })
	}
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
	return startHubOn(t, cluster, dir, servers, args...)
}

// startHubOn runs nodehub for one test in front of cluster c (its node certificate and CA).
func startHubOn(t *testing.T, c *harness.Cluster, dir, servers string, args ...string) *harness.Hub {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := c.StartHub(ctx, harness.HubOptions{Bin: nodehub, Dir: dir, Servers: servers, Args: args})
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

// nodePods makes pods on the edge node in ns (made if missing), for a test that needs some whatever
// ran before it, and deletes them when the test ends (after a hub started later has stopped).
func nodePods(t *testing.T, ns string, names ...string) {
	t.Helper()
	ctx := context.Background()
	if err := cluster.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if _, err := cluster.Admin.CoreV1().Pods(ns).Create(ctx, newPod(ns, name), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		deleteAtEnd(t, ns, name)
	}
}

// deleteAtEnd deletes a pod the test made when the test ends (before the cleanups registered
// earlier, after those registered later).
func deleteAtEnd(t *testing.T, ns, name string) {
	t.Cleanup(func() {
		_ = cluster.Admin.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	})
}
