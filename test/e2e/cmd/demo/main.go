// Command demo starts a real local control plane (etcd + kube-apiserver), runs nodehub in front of
// it as node edge-1, and shows kubectl talking to the cloud through the hub. It keeps running until
// interrupted (or exits after the show with -once), printing a kubeconfig to try more commands.
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

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/e2e/harness"
)

func main() {
	once := flag.Bool("once", false, "exit after the show instead of waiting for Ctrl-C")
	flag.Parse()
	if err := run(*once); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(once bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := os.MkdirTemp("", "nodehub-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	step("building nodehub and the control plane (etcd, kube-apiserver, kubectl; cached after the first time)")
	bin, err := harness.BuildNodehub(dir)
	if err != nil {
		return err
	}
	c, err := harness.StartCluster(ctx, dir, 1)
	if err != nil {
		return err
	}
	defer c.Stop()
	fmt.Printf("   kube-apiserver at %s\n", c.APIServers[0].URL)

	f := false
	for i := 0; i < 3; i++ {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("demo-%d", i)},
			Spec: corev1.PodSpec{NodeName: harness.NodeName, AutomountServiceAccountToken: &f,
				Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}}}}
		if _, err := c.Admin.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}

	step("starting nodehub as node " + harness.NodeName)
	hubDir := filepath.Join(dir, "hub")
	if err := os.MkdirAll(hubDir, 0o755); err != nil {
		return err
	}
	h, err := c.StartHub(ctx, harness.HubOptions{Bin: bin, Dir: hubDir, Args: []string{"--v=2"}})
	if err != nil {
		return err
	}
	defer h.Stop()
	if err := h.WaitHTTP(ctx, "/v1/readyz", 20*time.Second); err != nil {
		return err
	}
	fmt.Printf("   proxy port %s, hub endpoints %s\n", h.ProxyURL, h.HubURL)

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
	kubectl := filepath.Join(c.BinDir, "kubectl")
	for _, args := range [][]string{
		{"get", "--raw", "/version"},
		{"auth", "whoami"},
		{"get", "node", harness.NodeName, "-o", "wide"},
		{"get", "pods", "-A", "--field-selector", "spec.nodeName=" + harness.NodeName, "-o", "wide"},
	} {
		step("kubectl " + strings.Join(args, " ") + "   (through nodehub, as the node)")
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
		}
	}
	step("nodehub /metrics (excerpt)")
	_, body, err := h.Get("/metrics")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(body, "\n") {
		if len(line) > 0 && line[0] != '#' && (strings.Contains(line, "nodehub_requests_total") || strings.Contains(line, "nodehub_server_healthy")) {
			fmt.Println("   " + line)
		}
	}
	if once {
		return nil
	}
	step("running; try it yourself, Ctrl-C to stop:")
	fmt.Printf("   %s --kubeconfig %s get pods -A\n   curl %s/metrics\n", kubectl, kubeconfig, h.HubURL)
	<-ctx.Done()
	return nil
}

func step(s string) { fmt.Printf("\n==> %s\n", s) }
