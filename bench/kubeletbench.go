package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/e2e/harness"
)

// benchKubelet measures how long kubemark's hollow kubelet (the kubelet's own code, a fake
// container runtime), talking to the cloud only through nodehub, takes from its start to every
// pod's containers running again: restarted with the link up (the baseline), restarted with the
// link black-holed, and the whole node rebooted in the black hole (nodehub and kubelet). The fake
// runtime lives in the kubelet's process, so every start begins with no container at all, as
// after a reboot. "Running" is what the kubelet's own metrics say (kubelet_running_pods and
// kubelet_running_containers on its read-only port), which its runtime relist updates every second.
func benchKubelet(e *env, o options) error {
	const node, ns = "bench-kubelet", "bench-kubelet"
	ctx := e.ctx
	kcm, err := e.c.StartControllerManager(ctx, harness.ControllerOptions{Controllers: harness.KubeletControllers})
	if err != nil {
		return err
	}
	defer kcm.Stop()
	cert, key, err := e.c.NodeCredentials(node)
	if err != nil {
		return err
	}
	if err := e.c.BindNodeProxier(ctx, node); err != nil {
		return err
	}
	relay, dir, err := e.relay()
	if err != nil {
		return err
	}
	defer relay.Close()
	// Default health flags (the harness's fast heartbeat undone).
	h, err := e.c.StartHub(ctx, harness.HubOptions{Bin: e.bin, Dir: dir, Servers: relay.URL(),
		Args: []string{"--v=2", "--heartbeat-interval-seconds=10", "--node-name=" + node, "--client-cert=" + cert, "--client-key=" + key}})
	if err != nil {
		return err
	}
	defer h.Stop()
	if err := e.c.EnsureNamespace(ctx, ns); err != nil {
		return err
	}
	defer e.c.Admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	defer e.c.Admin.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{})
	zero := int64(0)
	defer e.c.Admin.CoreV1().Pods(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	if err := harness.CreateWorkloadSources(ctx, e.c.Admin, ns); err != nil {
		return err
	}
	for i := 0; i < o.kubeletPods; i++ {
		if _, err := e.c.Admin.CoreV1().Pods(ns).Create(ctx, harness.WorkloadPod(ns, fmt.Sprintf("app-%d", i), node), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	nodeDir := filepath.Join(dir, "node")
	if err := os.MkdirAll(nodeDir, 0o755); err != nil {
		return err
	}
	start := time.Now()
	hn, err := e.c.StartHollowNode(ctx, harness.HollowOptions{Name: node, Dir: nodeDir, Server: h.ProxyURL, Proxy: true})
	if err != nil {
		return err
	}
	defer hn.Stop()
	n := o.kubeletPods
	first, err := allStarted(ctx, hn, n, start)
	if err != nil {
		return err
	}
	settle(h)

	online, err := restartKubelet(ctx, hn, n)
	if err != nil {
		return fmt.Errorf("restart online: %w", err)
	}
	if err := relay.BlackHole(); err != nil {
		return err
	}
	healthy := `nodehub_server_healthy{server="` + relay.Addr + `"}`
	for t0 := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		if v, _ := h.Metric(healthy); v == 0 {
			break
		}
		if time.Since(t0) > time.Minute {
			return fmt.Errorf("nodehub did not notice the black hole")
		}
	}
	offline, err := restartKubelet(ctx, hn, n)
	if err != nil {
		return fmt.Errorf("restart offline: %w\n%s", err, tailLog(hn.Kubelet.Log()))
	}
	// The whole node: kubelet, kube-proxy and nodehub stop; nodehub and then both start again.
	hn.Proxy.Stop()
	hn.StopKubelet()
	h.Stop()
	t0 := time.Now()
	if err := h.Start(); err != nil {
		return err
	}
	if err := h.WaitHTTP(ctx, "/v1/healthz", 20*time.Second); err != nil {
		return err
	}
	if err := hn.Proxy.Start(); err != nil {
		return err
	}
	if err := hn.Kubelet.Start(); err != nil {
		return err
	}
	reboot, err := allStarted(ctx, hn, n, t0)
	if err != nil {
		return fmt.Errorf("reboot offline: %w\n%s", err, tailLog(hn.Kubelet.Log()))
	}
	if err := relay.Pass(); err != nil {
		return err
	}

	fmt.Printf("\n## kubelet through nodehub: kubemark's hollow kubelet (fake runtime) and kube-proxy, %d pods, each with %s\n", n, harness.WorkloadVolumes)
	fmt.Println("from the kubelet's exec to all pods' containers running (its runtime relist, every 1 s, bounds the precision)")
	fmt.Printf("kubelet_first_start_online\t%v\n", first.Round(100*time.Millisecond))
	fmt.Printf("kubelet_restart_online\t%v\n", online.Round(100*time.Millisecond))
	fmt.Printf("kubelet_restart_offline\t%v\t(black-holed link)\n", offline.Round(100*time.Millisecond))
	fmt.Printf("node_reboot_offline\t%v\t(from nodehub's exec; black-holed link)\n", reboot.Round(100*time.Millisecond))
	return nil
}

// restartKubelet stops the kubelet and measures from the new one's exec to n pods running.
func restartKubelet(ctx context.Context, hn *harness.HollowNode, n int) (time.Duration, error) {
	hn.StopKubelet()
	t0 := time.Now()
	if err := hn.Kubelet.Start(); err != nil {
		return 0, err
	}
	return allStarted(ctx, hn, n, t0)
}

// allStarted waits until the kubelet's runtime runs n pods with one running container each and
// returns the time since t0.
func allStarted(ctx context.Context, hn *harness.HollowNode, n int, t0 time.Time) (time.Duration, error) {
	var last string
	for time.Since(t0) < 5*time.Minute {
		p, c, err := hn.Running(ctx)
		if err == nil && p == n && c == n {
			return time.Since(t0), nil
		}
		last = fmt.Sprintf("%d pods, %d containers (%v)", p, c, err)
		if !hn.Kubelet.Running() {
			return 0, fmt.Errorf("the kubelet exited")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return 0, fmt.Errorf("not all %d pods running after 5 minutes: %s", n, last)
}

func tailLog(s string) string {
	if len(s) > 4000 {
		return s[len(s)-4000:]
	}
	return s
}
