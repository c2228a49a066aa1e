// Command demo shows nodehub's job on a laptop: a real local control plane (etcd,
// kube-apiserver, kube-controller-manager), nodehub in front of it as node edge-1, and kubemark's
// hollow node (the kubelet's and kube-proxy's own code with a fake container runtime) talking to the
// cloud only through nodehub. It shows the node Ready and its pods Running, cuts the link (a black
// hole: packets vanish, nothing is refused), shows kubectl through nodehub and the node still
// working offline, restarts the kubelet offline and shows every pod's containers started again,
// restores the link, and exits. With -wait it keeps running afterwards, printing
// a kubeconfig to try more commands.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/e2e/harness"
)

const pods = 3

func main() {
	wait := flag.Bool("wait", false, "keep running after the show until interrupted")
	flag.Bool("once", true, "exit after the show (the default; kept for older scripts)")
	offline := flag.Duration("offline", 30*time.Second, "how long the link stays cut")
	flag.Parse()
	if err := run(*wait, *offline); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(wait bool, offline time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := os.MkdirTemp("", "nodehub-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	step("building nodehub and the control plane (etcd, kube-apiserver, kube-controller-manager, kubectl, kubemark; cached after the first time)")
	bin, err := harness.BuildNodehub(dir)
	if err != nil {
		return err
	}
	c, err := harness.StartCluster(ctx, dir, 1)
	if err != nil {
		return err
	}
	defer c.Stop()
	kcm, err := c.StartControllerManager(ctx, harness.ControllerOptions{Controllers: harness.KubeletControllers})
	if err != nil {
		return err
	}
	defer kcm.Stop()
	fmt.Printf("   kube-apiserver at %s\n", c.APIServers[0].URL)

	// The cloud link: a relay the demo can black-hole.
	relay, err := harness.NewRelay(strings.TrimPrefix(c.APIServers[0].URL, "https://"))
	if err != nil {
		return err
	}
	defer relay.Close()

	if err := harness.CreateWorkloadSources(ctx, c.Admin, "default"); err != nil {
		return err
	}
	for i := 0; i < pods; i++ {
		p := harness.WorkloadPod("default", fmt.Sprintf("demo-%d", i), harness.NodeName)
		if _, err := c.Admin.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	fmt.Printf("   %d pods for node %s (%s)\n", pods, harness.NodeName, harness.WorkloadVolumes)

	step("starting nodehub as node " + harness.NodeName + ", its cloud link through a relay at " + relay.Addr)
	hubDir := filepath.Join(dir, "hub")
	if err := os.MkdirAll(hubDir, 0o755); err != nil {
		return err
	}
	h, err := c.StartHub(ctx, harness.HubOptions{Bin: bin, Dir: hubDir, Servers: relay.URL(), Args: []string{"--v=2"}})
	if err != nil {
		return err
	}
	defer h.Stop()
	if err := h.WaitHTTP(ctx, "/v1/readyz", 20*time.Second); err != nil {
		return err
	}
	fmt.Printf("   proxy port %s, hub endpoints %s\n", h.ProxyURL, h.HubURL)

	step("starting the hollow kubelet and kube-proxy (kubemark), talking only to nodehub's proxy port")
	nodeDir := filepath.Join(dir, "node")
	if err := os.MkdirAll(nodeDir, 0o755); err != nil {
		return err
	}
	node, err := c.StartHollowNode(ctx, harness.HollowOptions{Name: harness.NodeName, Dir: nodeDir, Server: h.ProxyURL, Proxy: true})
	if err != nil {
		return err
	}
	defer node.Stop()
	if err := waitFor(ctx, 2*time.Minute, func() error {
		n, err := c.Admin.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := harness.NodeReady(n); err != nil {
			return err
		}
		l, err := c.Admin.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		return harness.PodsStarted(l.Items, nil, time.Time{})
	}); err != nil {
		return fmt.Errorf("node and pods: %w\n%s", err, tail(node.Kubelet.Log()))
	}
	fmt.Printf("   node %s Ready and %d pods Running in the cloud\n", harness.NodeName, pods)

	kubeconfig := filepath.Join(dir, "hub.kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: hub, cluster: {server: %q}}]
users: [{name: node, user: {}}]
contexts: [{name: hub, context: {cluster: hub, user: node}}]
current-context: hub
`, h.ProxyURL)
	if err := os.WriteFile(kubeconfig, []byte(kc), 0o644); err != nil {
		return err
	}
	kubectl := func(args ...string) error {
		fmt.Printf("\n$ kubectl %s\n", strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, "kubectl"), append([]string{"--kubeconfig", kubeconfig, "--request-timeout=10s"}, args...)...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
		}
		return nil
	}
	onNode := "spec.nodeName=" + harness.NodeName
	step("online: kubectl through nodehub, as the node")
	for _, args := range [][]string{
		{"get", "--raw", "/version"},
		{"auth", "whoami"},
		{"get", "node", harness.NodeName, "-o", "wide"},
		{"get", "pods", "-A", "--field-selector", onNode, "-o", "wide"},
	} {
		if err := kubectl(args...); err != nil {
			return err
		}
	}
	fmt.Print("\n   ")
	if err := showRuntime(ctx, node); err != nil {
		return err
	}

	step(fmt.Sprintf("cutting the cloud link for %v (black hole: connections hang, nothing answers)", offline))
	if err := relay.BlackHole(); err != nil {
		return err
	}
	cutAt := time.Now()
	healthy := `nodehub_server_healthy{server="` + relay.Addr + `"}`
	if err := waitFor(ctx, 30*time.Second, func() error {
		if v, err := h.Metric(healthy); err != nil || v != 0 {
			return fmt.Errorf("%s = %v (%v)", healthy, v, err)
		}
		return nil
	}); err != nil {
		return err
	}
	fmt.Printf("   nodehub noticed the outage after %v (%s 0)\n", time.Since(cutAt).Round(100*time.Millisecond), healthy)
	step("offline: kubectl through nodehub, answered from its cache (offline, tables come without server-side columns: custom columns show the status)")
	for _, args := range [][]string{
		{"get", "node", harness.NodeName, "-o", `custom-columns=NAME:.metadata.name,READY:.status.conditions[?(@.type=="Ready")].status,HEARTBEAT:.status.conditions[?(@.type=="Ready")].lastHeartbeatTime`},
		{"get", "pods", "-A", "--field-selector", onNode, "-o", "custom-columns=NAME:.metadata.name,PHASE:.status.phase,RESTARTS:.status.containerStatuses[0].restartCount,STARTED:.status.containerStatuses[0].state.running.startedAt"},
		{"get", "configmap", harness.WorkloadConfigMap, "-o", "jsonpath={.data}"},
	} {
		if err := kubectl(args...); err != nil {
			return err
		}
	}
	fmt.Println()
	var renew0 string
	for {
		out, err := exec.CommandContext(ctx, filepath.Join(c.BinDir, "kubectl"), "--kubeconfig", kubeconfig, "--request-timeout=10s",
			"-n", "kube-node-lease", "get", "lease", harness.NodeName, "-o", "jsonpath={.spec.renewTime}").Output()
		if err != nil {
			return fmt.Errorf("kubectl get lease offline: %w", err)
		}
		if renew0 == "" {
			renew0 = string(out)
		}
		fmt.Printf("   %5.1fs offline: the kubelet's lease renewed at %s (through nodehub); ", time.Since(cutAt).Seconds(), out)
		if err := showRuntime(ctx, node); err != nil {
			return err
		}
		if time.Since(cutAt) >= offline {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(10*time.Second, offline)):
		}
	}
	if !node.Kubelet.Running() || !node.Proxy.Running() {
		return fmt.Errorf("the hollow node stopped offline:\n%s", tail(node.Kubelet.Log()))
	}

	step("restarting the kubelet while offline (its fake runtime goes with it: every container must start again, as after a reboot)")
	restartAt := time.Now()
	node.StopKubelet()
	if err := node.Kubelet.Start(); err != nil {
		return err
	}
	if err := waitFor(ctx, 90*time.Second, func() error {
		p, ctrs, err := node.Running(ctx)
		if err != nil {
			return err
		}
		if p != pods || ctrs != pods {
			return fmt.Errorf("the runtime runs %d pods, %d containers", p, ctrs)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("kubelet restarted offline: %w\n%s", err, tail(node.Kubelet.Log()))
	}
	fmt.Printf("   all %d pods' containers running again %v after the restart, the cloud still unreachable\n   (their ServiceAccount tokens, ConfigMap and Secret volumes came from nodehub)\n   ",
		pods, time.Since(restartAt).Round(100*time.Millisecond))
	if err := showRuntime(ctx, node); err != nil {
		return err
	}
	if err := kubectl("get", "pods", "-A", "--field-selector", onNode, "-o", "custom-columns=NAME:.metadata.name,PHASE:.status.phase,STARTED:.status.containerStatuses[0].state.running.startedAt"); err != nil {
		return err
	}

	step("restoring the cloud link")
	if err := relay.Pass(); err != nil {
		return err
	}
	backAt := time.Now()
	if err := waitFor(ctx, 60*time.Second, func() error {
		if v, err := h.Metric(healthy); err != nil || v != 1 {
			return fmt.Errorf("%s = %v (%v)", healthy, v, err)
		}
		return nil
	}); err != nil {
		return err
	}
	fmt.Printf("   nodehub noticed the return after %v\n", time.Since(backAt).Round(100*time.Millisecond))
	for _, args := range [][]string{
		{"get", "node", harness.NodeName},
		{"get", "pods", "-A", "--field-selector", onNode},
	} {
		if err := kubectl(args...); err != nil {
			return err
		}
	}

	step("nodehub /metrics (excerpt)")
	_, body, err := h.Get("/metrics")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(body, "\n") {
		if len(line) > 0 && line[0] != '#' && (strings.Contains(line, "nodehub_requests_total") && strings.Contains(line, `component="kubelet"`) ||
			strings.Contains(line, "nodehub_server_healthy")) {
			fmt.Println("   " + line)
		}
	}
	if !wait {
		step("done")
		return nil
	}
	step("running; try it yourself, Ctrl-C to stop:")
	fmt.Printf("   %s --kubeconfig %s get pods -A\n   curl %s/metrics\n", filepath.Join(c.BinDir, "kubectl"), kubeconfig, h.HubURL)
	<-ctx.Done()
	return nil
}

// showRuntime prints what the kubelet's container runtime runs, from its read-only port.
func showRuntime(ctx context.Context, n *harness.HollowNode) error {
	p, ctrs, err := n.Running(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("the kubelet's runtime runs %d pods, %d containers\n", p, ctrs)
	return nil
}

func waitFor(ctx context.Context, d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v: %w", d, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func tail(s string) string {
	if len(s) > 3000 {
		return "…" + s[len(s)-3000:]
	}
	return s
}

func step(s string) { fmt.Printf("\n==> %s\n", s) }
