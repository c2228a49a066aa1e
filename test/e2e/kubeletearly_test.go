package e2e

import (
	"context"
	"testing"
	"time"
)

// kubeletRestartEarly restarts the kubelet as the link is black-holed again, with the cloud back
// and the hub online (after cloudReturns): the kubelet's first requests go into the dead link, a
// reach finds the black hole, and every pod's containers run again from what the hub cached,
// as offlineStart checks. The goal is within 5 s of the restart (bench measures it at 0,
// 1, 3, 5 and 10 s after the cut; the test at 0 s).
func (k *kubeletScenario) kubeletRestartEarly(t *testing.T) {
	l, err := k.cloudPods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	k.names = nil
	for _, p := range l {
		k.names = append(k.names, p.Name)
	}
	healthy := `nodehub_server_healthy{server="` + k.relay.Addr + `"}`
	failedReaches := `nodehub_server_reach_probes_total{server="` + k.relay.Addr + `",result="failed"}`
	eventually(t, 60*time.Second, "hub online", func() error {
		if v, _ := k.hub.Metric(healthy); v != 1 {
			return errorf("server healthy %v", v)
		}
		return nil
	})
	cacheWritten(t, k.hub)
	before, _ := k.hub.Metric(failedReaches)
	defer k.relay.Pass()
	k.offlineStart(t, "kubelet restart as the link is cut", func() error {
		k.node.StopKubelet()
		if err := k.relay.BlackHole(); err != nil {
			return err
		}
		return k.node.Kubelet.Start()
	})
	if after, _ := k.hub.Metric(failedReaches); after <= before {
		t.Errorf("no reach found the black hole (%v failed reaches before, %v after)", before, after)
	}
}
