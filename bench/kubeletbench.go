package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/e2e/harness"
)

// kubeletFigures are one release's kubelet figures (benchKubelet).
type kubeletFigures struct {
	version                        string
	first, online, offline, reboot time.Duration
	moments                        []time.Duration // restarted at restartMoments after a cut
	err                            error
}

// benchKubelet measures, on each Kubernetes release of the harness (-kubelet-releases), how long
// kubemark's hollow kubelet of that release (the kubelet's own code, a fake container runtime),
// talking to the cloud only through nodehub, takes from its start to every pod's containers running
// again: restarted with the link up (the baseline), restarted with the link black-holed, and the
// whole node rebooted in the black hole (nodehub and kubelet). The fake runtime lives in the
// kubelet's process, so every start begins with no container at all, as after a reboot. "Running"
// is what the kubelet's own metrics say (kubelet_running_pods and kubelet_running_containers on
// its read-only port), which its runtime relist updates every second. Each release runs the same
// workload against a control plane of its own release; the figures are printed side by side.
func benchKubelet(e *env, o options) error {
	var figs []kubeletFigures
	for _, name := range strings.Split(o.kubeletReleases, ",") {
		r, err := harness.ReleaseNamed(strings.TrimSpace(name))
		if err != nil {
			return err
		}
		c := e.c
		if c.Release.Name != r.Name {
			if c, err = harness.StartClusterAt(e.ctx, r, filepath.Join(e.dir, "cluster-"+r.Name), 1); err != nil {
				return err
			}
		}
		f := measureKubelet(e, c, o)
		if c != e.c {
			c.Stop()
		}
		if f.err != nil {
			fmt.Fprintf(os.Stderr, "bench: kubelet %s: %v\n", f.version, f.err)
		}
		figs = append(figs, f)
	}
	fmt.Printf("\n## kubelet through nodehub: kubemark's hollow kubelet (fake runtime) and kube-proxy of each release, with a control plane of the same release, %d pods, each with %s\n", o.kubeletPods, harness.WorkloadVolumes)
	fmt.Println("from the kubelet's exec to all pods' containers running (its runtime relist, every 1 s, bounds the precision); - : not reached (see the error above)")
	line := func(name string, v func(kubeletFigures) time.Duration, note string) {
		fmt.Print(name)
		for _, f := range figs {
			if d := v(f); d > 0 {
				fmt.Printf("\t%s %v", f.version, d.Round(100*time.Millisecond))
			} else {
				fmt.Printf("\t%s -", f.version)
			}
		}
		fmt.Println(note)
	}
	line("kubelet_first_start_online", func(f kubeletFigures) time.Duration { return f.first }, "")
	line("kubelet_restart_online", func(f kubeletFigures) time.Duration { return f.online }, "")
	line("kubelet_restart_offline", func(f kubeletFigures) time.Duration { return f.offline }, "\t(black-holed link)")
	line("node_reboot_offline", func(f kubeletFigures) time.Duration { return f.reboot }, "\t(from nodehub's exec; black-holed link)")
	for i, m := range restartMoments {
		line(fmt.Sprintf("kubelet_restart_%ds_after_cut", int(m.Seconds())), func(f kubeletFigures) time.Duration {
			if i < len(f.moments) {
				return f.moments[i]
			}
			return 0
		}, "\t(goal ≤ 5 s; the link black-holed at the restart's moment, the hub idle since)")
	}
	for _, f := range figs {
		if f.err != nil {
			return fmt.Errorf("kubelet %s: %w", f.version, f.err)
		}
	}
	return nil
}

// measureKubelet runs benchKubelet's workload on cluster c and returns what it measured until
// the first failure.
func measureKubelet(e *env, c *harness.Cluster, o options) (f kubeletFigures) {
	f.version = c.Version
	f.err = func() error {
		const node, ns = "bench-kubelet", "bench-kubelet"
		ctx := e.ctx
		kcm, err := c.StartControllerManager(ctx, harness.ControllerOptions{Controllers: harness.KubeletControllers})
		if err != nil {
			return err
		}
		defer kcm.Stop()
		cert, key, err := c.NodeCredentials(node)
		if err != nil {
			return err
		}
		if err := c.BindNodeProxier(ctx, node); err != nil {
			return err
		}
		relay, err := harness.NewRelay(strings.TrimPrefix(c.APIServers[0].URL, "https://"))
		if err != nil {
			return err
		}
		defer relay.Close()
		dir, err := e.hubDir()
		if err != nil {
			return err
		}
		// Default health flags (the harness's fast heartbeat undone).
		h, err := c.StartHub(ctx, harness.HubOptions{Bin: e.bin, Dir: dir, Servers: relay.URL(),
			Args: []string{"--v=2", "--heartbeat-interval-seconds=10", "--node-name=" + node, "--client-cert=" + cert, "--client-key=" + key}})
		if err != nil {
			return err
		}
		defer h.Stop()
		if err := c.EnsureNamespace(ctx, ns); err != nil {
			return err
		}
		defer c.Admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		defer c.Admin.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{})
		zero := int64(0)
		defer c.Admin.CoreV1().Pods(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		if err := harness.CreateWorkloadSources(ctx, c.Admin, ns); err != nil {
			return err
		}
		for i := 0; i < o.kubeletPods; i++ {
			if _, err := c.Admin.CoreV1().Pods(ns).Create(ctx, harness.WorkloadPod(ns, fmt.Sprintf("app-%d", i), node), metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		nodeDir := filepath.Join(dir, "node")
		if err := os.MkdirAll(nodeDir, 0o755); err != nil {
			return err
		}
		start := time.Now()
		hn, err := c.StartHollowNode(ctx, harness.HollowOptions{Name: node, Dir: nodeDir, Server: h.ProxyURL, Proxy: true})
		if err != nil {
			return err
		}
		defer hn.Stop()
		n := o.kubeletPods
		if f.first, err = allStarted(ctx, hn, n, start); err != nil {
			return err
		}
		settle(h)

		if f.online, err = restartKubelet(ctx, hn, n); err != nil {
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
		if f.offline, err = restartKubelet(ctx, hn, n); err != nil {
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
		if f.reboot, err = allStarted(ctx, hn, n, t0); err != nil {
			return fmt.Errorf("reboot offline: %w\n%s", err, tailLog(hn.Kubelet.Log()))
		}
		f.moments, err = kubeletMoments(ctx, h, relay, hn, n)
		return err
	}()
	return f
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
