package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"nodehub/e2e/harness"
)

// benchKubeProxy measures, offline, how long the real kube-proxy in a network namespace takes from
// kubelet's status write of a pod at a new address (through nodehub, after an offline reboot) to
// the first connection to the Service's ClusterIP that reaches that address: the e2e test's
// scenario, TestKubeProxyThroughOfflineReboot, run with `runs` timed writes (nftables mode on both
// releases, iptables on the default one). Connections are sampled every 100 ms.
func benchKubeProxy(runs int) error {
	cmd := exec.Command("go", "test", "-count=1", "-v", "-timeout=30m", "-run=^TestKubeProxyThroughOfflineReboot$", "./")
	cmd.Dir = filepath.Join(harness.RepoRoot(), "test", "e2e")
	cmd.Env = append(os.Environ(), fmt.Sprintf("NODEHUB_E2E_KUBEPROXY_FIGURE=%d", runs))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("TestKubeProxyThroughOfflineReboot: %w\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "--- SKIP: TestKubeProxyThroughOfflineReboot") {
		fmt.Printf("\n## kube-proxy: skipped (TestKubeProxyThroughOfflineReboot needs root for its network namespace)\n")
		return nil
	}
	fmt.Printf("\n## the real kube-proxy in a network namespace, link black-holed, the node rebooted offline: kubelet's status write of web-0 at a new address → first connection to the ClusterIP reaching it (%d writes each; connections every 100 ms; kube-proxy's minimum sync period 1 s)\n", runs)
	release, n := "", 0
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		line := sc.Text()
		if sub, ok := strings.CutPrefix(strings.TrimSpace(line), "=== RUN   TestKubeProxyThroughOfflineReboot/"); ok {
			release, _, _ = strings.Cut(sub, "/") // the subtest's release
		}
		if _, fig, ok := strings.Cut(line, "FIGURE "); ok {
			fmt.Printf("%-6s %s\n", release, fig)
			n++
		}
	}
	if n == 0 {
		return fmt.Errorf("no kube-proxy figure in the test's output:\n%s", out.String())
	}
	return nil
}
