package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/cache"
	"nodehub/e2e/harness"
)

// The ARM binaries, under qemu user emulation: both report their version, and the arm64 one
// proxies, caches and answers offline against the real control plane.
func TestARMBinariesUnderQemu(t *testing.T) {
	q64, err1 := exec.LookPath("qemu-aarch64-static")
	q32, err2 := exec.LookPath("qemu-arm-static")
	if err1 != nil || err2 != nil {
		t.Fatal("qemu-aarch64-static / qemu-arm-static not found: install Debian's qemu-user-static (make deps does)")
	}
	dir := t.TempDir()
	for _, a := range []struct{ goarch, goarm, qemu, want string }{{"arm64", "", q64, "linux/arm64"}, {"arm", "7", q32, "linux/arm"}} {
		bin, err := harness.BuildFor(dir, a.goarch, a.goarm)
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(a.qemu, bin, "--version").CombinedOutput()
		if err != nil || !strings.Contains(string(out), a.want) {
			t.Fatalf("%s --version: %v %s", a.goarch, err, out)
		}
	}

	nodePods(t, "arm", "arm-pod")
	relay, err := harness.NewRelay(strings.TrimPrefix(cluster.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Refuse()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hubDir := t.TempDir()
	h, err := cluster.StartHub(ctx, harness.HubOptions{Bin: filepath.Join(dir, "nodehub-arm64"), Emulator: q64, Dir: hubDir, Servers: relay.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Stop()
		if t.Failed() {
			t.Logf("nodehub (arm64) log:\n%s", tailString(h.Log(), 4000))
		}
	})
	if err := h.WaitHTTP(ctx, "/v1/readyz", time.Minute); err != nil {
		t.Fatal(err)
	}
	kubelet := h.Client(kubeletUA, true)
	if _, err := kubelet.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{}); err != nil {
		t.Fatalf("arm64 hub: get node: %v", err)
	}
	pods, err := kubelet.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + harness.NodeName})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("arm64 hub: list pods: %v", err)
	}
	p := pods.Items[0]
	eventually(t, 60*time.Second, "arm64 hub cached the pods", func() error {
		_, _, err := cache.ReadFile(filepath.Join(h.CacheDir, "kubelet/pods.v1.core", p.Namespace, p.Name))
		return err
	})
	relay.Refuse()
	eventually(t, 20*time.Second, "arm64 hub answers offline", func() error {
		n, err := kubelet.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if v, _ := h.Metric(`nodehub_offline_requests_total{verb="get"}`); v < 1 {
			return fmt.Errorf("answered, but not offline yet (%s)", n.Name)
		}
		return nil
	})
}
