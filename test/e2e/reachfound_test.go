package e2e

import (
	"strings"
	"testing"
	"time"

	"nodehub/e2e/harness"
)

// blackHoleFound checks how a hub that was online when a client was (re)started into an outage
// found the black hole: a reach sent for the client's waiting requests (what serves the client
// within ~2 s), counted by the failed-reach series, or, when the link's cut fell so that the hub's
// own heartbeat was already out, that heartbeat's timeout (then the reach still out fails a little
// later, or was never sent because the heartbeat's retries decided before any request waited).
// It waits on the hub's state: the reach's deadline may end after the client was served.
func blackHoleFound(t *testing.T, hub *harness.Hub, relayAddr string, reachesBefore float64, logFrom int) {
	t.Helper()
	failed := `nodehub_server_reach_probes_total{server="` + relayAddr + `",result="failed"}`
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if v, _ := hub.Metric(failed); v > reachesBefore {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, line := range strings.Split(hub.Log()[logFrom:], "\n") {
		if strings.Contains(line, `msg="cloud server unhealthy"`) && !strings.Contains(line, "the link did not answer") {
			t.Logf("the hub's heartbeat found the black hole before a reach did: %s", line)
			return
		}
	}
	t.Errorf("the hub was online, and neither a reach nor a heartbeat found the black hole within 30 s")
}
