package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/cache"
	"nodehub/e2e/harness"
)

// A pod of kubelet's cached list became unreadable (a rotten record on the card): a hub restarted
// offline must not answer kubelet the rest of the list as if it were whole, or kubelet kills the
// missing pod. It answers 503, as for an empty list.
func TestOfflinePodListWithAnUnreadablePodIsNotServed(t *testing.T) {
	ctx := context.Background()
	ns := "cachefault"
	nodePods(t, ns, "rot-a", "rot-b")
	relay, err := harness.NewRelay(strings.TrimPrefix(cluster.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Refuse()
	dir := t.TempDir()
	h := startHubIn(t, dir, relay.URL(), "--heartbeat-timeout-seconds=1")
	nodeSel := metav1.ListOptions{FieldSelector: "spec.nodeName=" + harness.NodeName}
	online := podNames(t, h.Client(kubeletUA, true), "", nodeSel)
	eventually(t, 60*time.Second, "pods cached", func() error {
		_, _, err := cache.ReadFile(filepath.Join(h.CacheDir, "kubelet/pods.v1.core", ns, "rot-b"))
		return err
	})
	h.Stop()

	// Rot a byte of rot-b's record (its header names it in plain).
	log := filepath.Join(h.CacheDir, ".logs/pods.v1.core.log")
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(data, []byte("rot-b")) // the pod's record, before the list's
	if i < 0 {
		t.Fatal("rot-b's record not found")
	}
	data[i] ^= 0x20
	if err := os.WriteFile(log, data, 0o600); err != nil {
		t.Fatal(err)
	}

	relay.Refuse()
	h2 := startHubIn(t, dir, relay.URL(), "--heartbeat-timeout-seconds=1")
	_, err = h2.Client(kubeletUA, true).CoreV1().Pods("").List(ctx, nodeSel)
	if !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("kubelet's offline pod list with an unreadable pod (online: %v): %v, want 503", online, err)
	}
	// Other readers still get what can be read.
	if l, err := h2.Client(kubeProxyUA, false).CoreV1().Pods(ns).Get(ctx, "rot-a", metav1.GetOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("a readable pod: %v %v", l, err)
	}
}

// SD and eMMC cards fail read-only: a hub whose cache directory cannot be written starts, proxies,
// answers offline from what it holds, and says so in /v1/readyz.
func TestReadOnlyCacheStartsProxiesAndAnswersOffline(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	ctx := context.Background()
	ns := "cachero"
	nodePods(t, ns, "ro-a")
	dir := t.TempDir()
	cacheDir := filepath.Join(dir, "cache")
	if err := os.MkdirAll(cacheDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", cacheDir, "tmpfs", 0, "size=16m,mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	defer unix.Unmount(cacheDir, unix.MNT_DETACH)
	relay, err := harness.NewRelay(strings.TrimPrefix(cluster.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Refuse()
	h := startHubIn(t, dir, relay.URL(), "--heartbeat-timeout-seconds=1")
	nodeSel := metav1.ListOptions{FieldSelector: "spec.nodeName=" + harness.NodeName}
	want := podNames(t, h.Client(kubeletUA, true), "", nodeSel)
	eventually(t, 60*time.Second, "pods cached", func() error {
		_, _, err := cache.ReadFile(filepath.Join(h.CacheDir, "kubelet/pods.v1.core", ns, "ro-a"))
		return err
	})
	h.Stop()
	if err := unix.Mount("tmpfs", cacheDir, "tmpfs", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}

	h2 := startHubIn(t, dir, relay.URL(), "--heartbeat-timeout-seconds=1")
	_, body, err := h2.Get("/v1/readyz")
	if err != nil || !strings.Contains(body, "cache read-only") {
		t.Fatalf("readyz does not say the cache is read-only: %q %v", body, err)
	}
	if v, _ := h2.Metric("nodehub_cache_read_only"); v != 1 {
		t.Fatalf("nodehub_cache_read_only = %v", v)
	}
	if got := podNames(t, h2.Client(kubeletUA, true), "", nodeSel); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("online through a read-only cache: %v, want %v", got, want)
	}
	relay.Refuse()
	eventually(t, 20*time.Second, "offline answer from the read-only cache", func() error {
		l, err := h2.Client(kubeletUA, true).CoreV1().Pods("").List(ctx, nodeSel)
		if err != nil {
			return err
		}
		if len(l.Items) != len(want) {
			t.Fatalf("offline from a read-only cache: %d pods, want %d", len(l.Items), len(want))
		}
		return nil
	})
}
