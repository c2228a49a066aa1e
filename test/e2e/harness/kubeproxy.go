package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// KubeProxy builds (once per the release module's go.sum: kubeproxy/build.sh) and returns the
// path of the release's real kube-proxy.
func (r Release) KubeProxy() (string, error) {
	script := filepath.Join(RepoRoot(), "test", "e2e", "kubeproxy", "build.sh")
	cmd := exec.Command("sh", script, r.ModuleDir())
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("build kube-proxy %s: %w", r.Name, err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "kube-proxy"), nil
}

// KubeProxyConfig is a kube-proxy configuration file (KubeProxyConfiguration v1alpha1) for a
// kube-proxy that talks to the API through kubeconfig as node, in mode ("nftables" or
// "iptables"), with nodeIP its node's address and NodePorts on nodePortCIDR. It sets no kernel
// tunable a network namespace of its own cannot set.
func KubeProxyConfig(kubeconfig, node, mode, nodeIP, nodePortCIDR string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %q
  qps: 50
  burst: 100
hostnameOverride: %q
bindAddress: %q
mode: %q
nodePortAddresses: [%q]
healthzBindAddress: "127.0.0.1:10256"
metricsBindAddress: "127.0.0.1:10249"
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, kubeconfig, node, nodeIP, mode, nodePortCIDR)
}

// PlainKubeconfig is a kubeconfig for server (plain HTTP: nodehub's proxy port) without
// credentials.
func PlainKubeconfig(server string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: hub
  cluster:
    server: %q
contexts:
- name: hub
  context:
    cluster: hub
    user: node
users:
- name: node
  user: {}
current-context: hub
`, server)
}
