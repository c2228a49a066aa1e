package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestMetricsParseWithPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: install Debian's prometheus package (make deps does)")
	}
	h := startHub(t)
	getNodes(t, h, 3)
	code, body, err := h.Get("/metrics")
	if err != nil || code != 200 {
		t.Fatalf("/metrics: %d %v", code, err)
	}
	for _, want := range []string{
		`nodehub_requests_total{verb="get",resource="nodes",component="kubelet",code="200"} 3`,
		`nodehub_server_healthy{server=`,
		`nodehub_request_duration_seconds_bucket{verb="get",resource="nodes",component="kubelet",le="+Inf"} 3`,
		`nodehub_cloud_received_bytes_total{component="kubelet",resource="nodes"}`,
		`nodehub_inflight_requests `,
		// YurtHub's names, for the dashboards operators have
		`node_yurthub_server_healthy_status{server=`,
		`node_yurthub_in_flight_requests_total `,
		`node_yurthub_proxy_traffic_collector{client="kubelet",verb="get",resource="nodes",subresources=""}`,
		`node_yurthub_rejected_requests_counter 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	f := filepath.Join(t.TempDir(), "metrics.txt")
	if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	in, _ := os.Open(f)
	defer in.Close()
	cmd.Stdin = in
	// YurtHub's metric names break two naming conventions on purpose ("_total" on a gauge, none on
	// its counters); promtool lints those, and only those may appear.
	if out, err := cmd.CombinedOutput(); err != nil && len(lintBeyondYurtHubNames(string(out))) > 0 {
		t.Fatalf("promtool check metrics: %v\n%s\n--- metrics:\n%s", err, out, body)
	}
}

// lintBeyondYurtHubNames returns promtool's complaints other than the naming-convention ones
// YurtHub's names earn.
func lintBeyondYurtHubNames(out string) []string {
	var bad []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line != "" && !(strings.HasPrefix(line, "node_yurthub_") && (strings.Contains(line, `"_total" suffix`) || strings.Contains(line, "should not include type"))) {
			bad = append(bad, line)
		}
	}
	return bad
}
