package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"nodehub/e2e/harness"
)

// benchFlannel measures how long real flannel (host-gw, its Kubernetes subnet manager), restarted
// on a node whose link is black-holed, takes from its start to its subnet.env written and the
// route to the other node's pod subnet programmed, from nodehub's cache: with the hub running,
// and after the node rebooted offline (the hub restarted too). The two-node setup (network
// namespaces, a hub in each) is the e2e test's, TestFlannelOffline, run with restarts of each kind.
func benchFlannel(restarts int) error {
	out, skipped, err := runE2E("TestFlannelOffline", fmt.Sprintf("NODEHUB_FLANNEL_RESTARTS=%d", restarts))
	if err != nil || skipped {
		return err
	}
	figures := map[string][]time.Duration{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		kind, d, ok := flannelFigure(sc.Text())
		if ok {
			figures[kind] = append(figures[kind], d)
		}
	}
	fmt.Printf("\n## flannel (v0.28.10, host-gw, kube subnet manager, ServiceAccount token on the hub's secure port), restarted with the cloud black-holed: start → subnet.env written and the route to the other node's pods programmed (polled every 20 ms)\n")
	for _, kind := range []string{"online", "false", "true"} {
		ds := figures[kind]
		if len(ds) == 0 {
			return fmt.Errorf("no flannel figure (hub restarted too: %s) in the test's output:\n%s", kind, out)
		}
		what := map[string]string{"online": "online, first start (both nodes)", "false": "offline, hub running",
			"true": "offline, node rebooted (hub restarted first)"}[kind]
		fmt.Printf("%-45s runs %d  median %v  worst %v\n", what, len(ds), pct(ds, 50), pct(ds, 100))
	}
	return nil
}

// flannelFigure parses the test's lines "flannel restart offline, routes programmed (hub restarted
// too: <bool>): <duration>" and "online: both nodes programmed <duration> after flannel's start".
func flannelFigure(line string) (kind string, d time.Duration, ok bool) {
	if _, rest, found := strings.Cut(line, "online: both nodes programmed "); found {
		d, err := time.ParseDuration(strings.TrimSuffix(rest, " after flannel's start"))
		return "online", d, err == nil
	}
	_, rest, found := strings.Cut(line, "flannel restart offline, routes programmed (hub restarted too: ")
	if !found {
		return "", 0, false
	}
	kind, val, found := strings.Cut(rest, "): ")
	if !found {
		return "", 0, false
	}
	d, err := time.ParseDuration(strings.TrimSpace(val))
	return kind, d, err == nil
}

// runE2E runs one e2e test (its namespaces and control planes are the test's own) with env added,
// and returns its verbose output; skipped when the test skipped itself (it needs root).
func runE2E(test string, env ...string) (out string, skipped bool, err error) {
	cmd := exec.Command("go", "test", "-count=1", "-v", "-timeout=30m", "-run=^"+test+"$", "./")
	cmd.Dir = filepath.Join(harness.RepoRoot(), "test", "e2e")
	cmd.Env = append(os.Environ(), env...)
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	if err := cmd.Run(); err != nil {
		return "", false, fmt.Errorf("%s: %w\n%s", test, err, b.String())
	}
	if strings.Contains(b.String(), "--- SKIP: "+test) {
		fmt.Printf("\n## %s: skipped (it needs root for its network namespaces)\n", test)
		return b.String(), true, nil
	}
	return b.String(), false, nil
}
