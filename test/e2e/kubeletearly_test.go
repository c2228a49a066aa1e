package e2e

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/e2e/harness"
)

// kubeletRestartEarly restarts the kubelet as the link is black-holed again, with the cloud back
// and the hub online (after cloudReturns): the kubelet's first requests go into the dead link, a
// reach finds the black hole, and every pod's containers run again from what the hub cached: the
// runtime runs them, and the status the kubelet reported to nodehub says they started after the
// restart. The goal is within 5 s of the restart (bench measures it at 0,
// 1, 3, 5 and 10 s after the cut; the test at 0 s). Its node turns Ready through nodehub: when
// kubelet's first status write (its CSINode not yet initialized: Ready=False) beats its CSI
// init's answer, the next one (Ready=True) is sent only if the offline watch of its node showed
// the first (kubelet v1.37 compares with its informer's copy).
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
	hubLogFrom := len(k.hub.Log())
	defer k.relay.Pass()
	k.node.StopKubelet()
	if err := k.relay.BlackHole(); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	if err := k.node.Kubelet.Start(); err != nil {
		t.Fatal(err)
	}
	k.waitRunning(t, len(k.names), 2*time.Minute)
	t.Logf("kubelet restarted as the link was cut: all %d pods' containers started %v after the restart (the goal: within 5 s; bench measures it)",
		len(k.names), time.Since(at).Round(100*time.Millisecond))
	eventually(t, 60*time.Second, "the restarted kubelet reported its node Ready to nodehub", func() error {
		n, err := k.view.CoreV1().Nodes().Get(context.Background(), hollowNode, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return harness.NodeReady(n)
	})
	eventually(t, 60*time.Second, "the kubelet reported every container started to nodehub", func() error {
		l, err := k.viewPods(context.Background())
		if err != nil {
			return err
		}
		return harness.PodsStarted(l, k.names, at)
	})
	blackHoleFound(t, k.hub, k.relay.Addr, before, hubLogFrom)
}
