package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/e2e/harness"
)

func upstreamOK(t *testing.T, h *harness.Hub, a *harness.APIServer) float64 {
	t.Helper()
	v, err := h.Metric(fmt.Sprintf(`nodehub_upstream_requests_total{server="127.0.0.1:%d",result="ok"}`, a.Port))
	if err != nil {
		t.Fatal(err)
	}
	if v < 0 {
		return 0
	}
	return v
}

func healthGauge(t *testing.T, h *harness.Hub, a *harness.APIServer) float64 {
	t.Helper()
	v, err := h.Metric(fmt.Sprintf(`nodehub_server_healthy{server="127.0.0.1:%d"}`, a.Port))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// getNodes does n GETs of the node through the hub and fails the test on any error.
func getNodes(t *testing.T, h *harness.Hub, n int) {
	t.Helper()
	cl := h.Client(kubeletUA, true)
	for i := 0; i < n; i++ {
		if _, err := cl.CoreV1().Nodes().Get(context.Background(), harness.NodeName, metav1.GetOptions{}); err != nil {
			t.Fatalf("get %d: %v", i, err)
		}
	}
}

func TestLoadBalancingRoundRobinAndPriorityWithFailover(t *testing.T) {
	a, b := cluster.APIServers[0], cluster.APIServers[1]
	t.Cleanup(func() {
		if !a.Running() {
			_ = cluster.Restart(context.Background(), a)
		}
	})

	// Both subtests count from the moment both servers' first probes said healthy: which probe
	// answers first at start is a race, and a request before both verdicts may go either way.
	bothHealthy := func(t *testing.T, h *harness.Hub) (float64, float64) {
		eventually(t, 30*time.Second, "both servers healthy", func() error {
			if healthGauge(t, h, a) != 1 || healthGauge(t, h, b) != 1 {
				return fmt.Errorf("not yet")
			}
			return nil
		})
		return upstreamOK(t, h, a), upstreamOK(t, h, b)
	}

	t.Run("rr spreads", func(t *testing.T) {
		h := startHub(t, "--lb-mode=rr")
		a0, b0 := bothHealthy(t, h)
		getNodes(t, h, 20)
		na, nb := upstreamOK(t, h, a)-a0, upstreamOK(t, h, b)-b0
		if na < 5 || nb < 5 {
			t.Fatalf("rr sent %v requests to %s and %v to %s; want both well used", na, a.URL, nb, b.URL)
		}
	})

	t.Run("priority takes the first", func(t *testing.T) {
		h := startHub(t, "--lb-mode=priority")
		a0, b0 := bothHealthy(t, h)
		getNodes(t, h, 20)
		if na, nb := upstreamOK(t, h, a)-a0, upstreamOK(t, h, b)-b0; na < 20 || nb != 0 {
			t.Fatalf("priority sent %v to the first server and %v to the second", na, nb)
		}
	})

	for _, mode := range []string{"priority", "rr"} {
		t.Run(mode+" fails over when a server stops", func(t *testing.T) {
			h := startHub(t, "--lb-mode="+mode, "--heartbeat-failed-retry=2", "--heartbeat-healthy-threshold=2")
			getNodes(t, h, 4)
			a.Stop()
			start := time.Now()
			// Every request still succeeds: a refused connection is retried on the other server.
			before := upstreamOK(t, h, b)
			getNodes(t, h, 20)
			if got := upstreamOK(t, h, b) - before; got < 20 {
				t.Fatalf("only %v of 20 requests went to the surviving server", got)
			}
			if healthGauge(t, h, a) != 0 {
				t.Fatalf("stopped server still healthy %v after it stopped", time.Since(start))
			}
			if err := cluster.Restart(context.Background(), a); err != nil {
				t.Fatal(err)
			}
			back := time.Now()
			eventually(t, 60*time.Second, "restarted server healthy again", func() error {
				if healthGauge(t, h, a) != 1 {
					return fmt.Errorf("not yet")
				}
				return nil
			})
			t.Logf("healthy again %v after the restart", time.Since(back).Round(time.Millisecond))
			if mode == "priority" {
				before := upstreamOK(t, h, a)
				getNodes(t, h, 5)
				if got := upstreamOK(t, h, a) - before; got != 5 {
					t.Fatalf("priority did not return to the first server: %v of 5", got)
				}
			}
		})
	}
}

func TestHealthFlipsWithinThresholds(t *testing.T) {
	a := cluster.APIServers[0]
	t.Cleanup(func() {
		if !a.Running() {
			_ = cluster.Restart(context.Background(), a)
		}
	})
	// No client traffic (and no filters, whose topology watch is traffic too, and no pool sharing,
	// whose list+watch is too): only heartbeats decide. interval 1s, 3 failures, 2 successes, timeout 1s.
	h := startHub(t, "--heartbeat-failed-retry=3", "--heartbeat-healthy-threshold=2", "--heartbeat-timeout-seconds=1", "--enable-resource-filter=false", "--pool-scope-resources=")
	eventually(t, 60*time.Second, "healthy at start, and the hub's own start-up re-list of the node's pods done", func() error {
		if healthGauge(t, h, a) != 1 || upstreamOK(t, h, a)+upstreamOK(t, h, cluster.APIServers[1]) < 1 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	down := time.Now() // before the stop: no heartbeat can fail earlier, however long stopping takes
	a.Stop()
	// 3 failed heartbeats 1s apart: between 2s and 3s + timeout after the stop. The lower bound
	// below proves the count; the deadline only catches a hub that never turns (slack for a
	// loaded machine).
	eventually(t, 15*time.Second, "unhealthy after 3 failed heartbeats", func() error {
		if healthGauge(t, h, a) != 0 {
			return fmt.Errorf("gauge not 0")
		}
		return nil
	})
	if d := time.Since(down); d < 1500*time.Millisecond {
		t.Fatalf("turned unhealthy after %v: fewer failures than --heartbeat-failed-retry", d)
	}
	t.Logf("unhealthy %v after the stop", time.Since(down).Round(time.Millisecond))
	if err := cluster.Restart(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	eventually(t, 15*time.Second, "healthy after 2 good heartbeats", func() error {
		if healthGauge(t, h, a) != 1 {
			return fmt.Errorf("gauge not 1")
		}
		return nil
	})
	t.Logf("healthy %v after the restart", time.Since(up).Round(time.Millisecond))
}
