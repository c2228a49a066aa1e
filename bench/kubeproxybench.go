package main

import (
	"bufio"
	"fmt"
	"strings"
)

// benchKubeProxy measures, offline, how long the real kube-proxy in a network namespace takes from
// kubelet's status write of a pod at a new address (through nodehub, after an offline reboot) to
// the first connection to the Service's ClusterIP that reaches that address: the e2e test's
// scenario, TestKubeProxyThroughOfflineReboot, run with `runs` timed writes in both modes on each release. Connections are sampled every 100 ms.
func benchKubeProxy(runs int) error {
	out, skipped, err := runE2E("TestKubeProxyThroughOfflineReboot", fmt.Sprintf("NODEHUB_E2E_KUBEPROXY_FIGURE=%d", runs), "NODEHUB_E2E_KUBEPROXY_BOTH=1")
	if err != nil || skipped {
		return err
	}
	fmt.Printf("\n## the real kube-proxy in a network namespace, link black-holed, the node rebooted offline: kubelet's status write of web-0 at a new address → first connection to the ClusterIP reaching it (%d writes each; connections every 100 ms; kube-proxy's minimum sync period 1 s)\n", runs)
	release, n := "", 0
	sc := bufio.NewScanner(strings.NewReader(out))
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
		return fmt.Errorf("no kube-proxy figure in the test's output:\n%s", out)
	}
	return nil
}
