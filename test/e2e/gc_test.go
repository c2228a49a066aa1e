package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/cache"
	"nodehub/e2e/harness"
)

func TestRestartCollectsPodsDeletedWhileTheHubWasDown(t *testing.T) {
	ctx := context.Background()
	ns := "gcpods"
	nodePods(t, ns, "stay", "go")
	dir := t.TempDir()
	h := startHubIn(t, dir, "")
	if _, err := h.Client(kubeletUA, true).CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + harness.NodeName}); err != nil {
		t.Fatal(err)
	}
	goneFile := filepath.Join(h.CacheDir, "kubelet/pods.v1.core", ns, "go")
	eventually(t, 60*time.Second, "pod cached", func() error { _, _, err := cache.ReadFile(goneFile); return err })
	h.Stop()

	if err := cluster.Admin.CoreV1().Pods(ns).Delete(ctx, "go", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	h2 := startHubIn(t, dir, "")
	eventually(t, 60*time.Second, "pod deleted while the hub was down leaves the cache", func() error {
		if _, _, err := cache.ReadFile(goneFile); err == nil {
			return fmt.Errorf("%s still cached", goneFile)
		}
		return nil
	})
	if _, _, err := cache.ReadFile(filepath.Join(h2.CacheDir, "kubelet/pods.v1.core", ns, "stay")); err != nil {
		t.Fatalf("a pod the cloud still has was collected: %v", err)
	}

	// DELETE /v1/cache/kubelet drops kubelet's whole cache.
	req, _ := http.NewRequest(http.MethodDelete, h2.HubURL+"/v1/cache/kubelet", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("DELETE /v1/cache/kubelet: %v %v", resp, err)
	}
	resp.Body.Close()
	if cachedOwner(t, h2.CacheDir, "kubelet") {
		t.Fatal("kubelet's cache still there")
	}
	req, _ = http.NewRequest(http.MethodDelete, h2.HubURL+"/v1/cache/..", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode == 200 {
		t.Fatalf("DELETE of a path was accepted: %v", resp)
	}
}
