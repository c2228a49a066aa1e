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
		t.Fatal("promtool not found: install Debian's prometheus package (.ci/run does)")
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
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s\n--- metrics:\n%s", err, out, body)
	}
}
