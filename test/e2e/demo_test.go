package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// make demo is one of the two commands README promises: it must keep working, and show the node
// online, offline, and its pods started again by a kubelet restarted offline.
func TestDemoRuns(t *testing.T) {
	cmd := exec.Command("go", "run", "./cmd/demo", "-offline=10s")
	cmd.Env = append(os.Environ(), "NODEHUB_BIN="+nodehub)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	for _, want := range []string{"system:node:edge-1", "demo-0", "nodehub_requests_total",
		"node edge-1 Ready and 3 pods Running", "offline: the kubelet's lease renewed", "all 3 pods' containers running again"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("demo output lacks %q:\n%s", want, out)
		}
	}
}
