package e2e

import (
	"context"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"nodehub/e2e/harness"
)

// Real flannel (test/e2e/flannel: flanneld v0.28.10 as published) with its Kubernetes subnet
// manager and the host-gw backend on two nodes — network namespaces joined by a veth pair — each
// behind its own nodehub, flannel with its own ServiceAccount token on the hub's secure port.
// Online each node gets its podCIDR as its subnet, flannel's annotations reach the cloud through
// the hub, each node routes the other's pod subnet, and a pod address on one node reaches one on
// the other. Then node A's link is black-holed and flannel restarted there (its subnet.env and
// route gone, as after a reboot): from the hub's cache it writes the same subnet.env, programs the
// route again, pod-to-pod traffic works, and it keeps running with its node patches bounded.
// After the return nothing is re-allocated: the Nodes' podCIDRs and flannel's annotations in the
// cloud and both subnet.env files are as before. One release (the shared control plane).
func TestFlannelOffline(t *testing.T) {
	ctx := context.Background()
	bin, err := harness.FlannelBinary()
	if err != nil {
		t.Fatal(err)
	}
	startControllerManagerOn(t, cluster, 0) // signs the hubs' serving certificates
	approve, cancel := context.WithCancel(ctx)
	defer cancel()
	go approveServing(approve, "system:node:flannel-a", "system:node:flannel-b")
	token := flannelToken(t, ctx)
	a, b := flannelNodes(t, ctx)
	const port = 8080
	for _, n := range []*flannelNode{a, b} {
		startNodeHub(t, n)
		startFlannel(t, n, bin, token)
		servePod(t, n, port)
	}
	start := time.Now()
	eventually(t, 90*time.Second, "flannel programmed on both nodes", func() error {
		if err := a.programmed(b); err != nil {
			return err
		}
		return b.programmed(a)
	})
	t.Logf("online: both nodes programmed %v after flannel's start", time.Since(start).Round(time.Millisecond))
	eventually(t, 30*time.Second, "pod to pod across the nodes", func() error {
		if err := podToPod(a, b, port); err != nil {
			return err
		}
		return podToPod(b, a, port)
	})
	annA, annB := flannelAnnotations(t, ctx, a.name), flannelAnnotations(t, ctx, b.name)
	if annA["flannel.alpha.coreos.com/public-ip"] != a.gateway() || annA["flannel.alpha.coreos.com/backend-type"] != "host-gw" {
		t.Fatalf("flannel's annotations of %s in the cloud: %v", a.name, annA)
	}
	envA, envB := a.subnetEnv(), b.subnetEnv()
	cacheWritten(t, a.hub)

	flannelOfflineRestart(t, a, b, port, false)
	flannelOfflineRestart(t, a, b, port, true)

	// The return: nothing re-allocated.
	if err := a.relay.Pass(); err != nil {
		t.Fatal(err)
	}
	hubHealth(t, a, 1)
	eventually(t, 30*time.Second, "pod to pod after the return", func() error { return podToPod(a, b, port) })
	if got := flannelAnnotations(t, ctx, a.name); !maps.Equal(got, annA) {
		t.Errorf("%s in the cloud after the return: %v, before: %v", a.name, got, annA)
	}
	if got := flannelAnnotations(t, ctx, b.name); !maps.Equal(got, annB) {
		t.Errorf("%s in the cloud after the return: %v, before: %v", b.name, got, annB)
	}
	if a.subnetEnv() != envA || b.subnetEnv() != envB {
		t.Errorf("subnet.env after the return: %q %q, before: %q %q", a.subnetEnv(), b.subnetEnv(), envA, envB)
	}
	if err := a.programmed(b); err != nil {
		t.Error(err)
	}
}

// flannelOfflineRestart restarts node a's flannel offline (black-holing a's link first if it is
// not) with its subnet.env and route to b gone, and its hub too when reboot (the node rebooted
// offline), and checks flannel comes back from the hub's cache.
func flannelOfflineRestart(t *testing.T, a, b *flannelNode, port int, reboot bool) {
	t.Helper()
	env := a.subnetEnv()
	a.fl.Stop()
	if reboot {
		a.hub.Stop()
		if err := a.hub.Start(); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "hub restarted offline serving", func() error { return a.secureServing(context.Background()) })
	} else {
		if err := a.relay.BlackHole(); err != nil {
			t.Fatal(err)
		}
	}
	hubHealth(t, a, 0)
	a.ns.mustIP(t, "route", "del", b.podCIDR)
	if err := os.Remove(a.fl.SubnetFile); err != nil {
		t.Fatal(err)
	}
	patches, mark := nodePatches(t, a.hub), len(a.fl.Log())
	since := func() string { return a.fl.Log()[mark:] }
	if err := a.fl.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "flannel restarted offline programmed", func() error { return a.programmed(b) })
	t.Logf("restarted offline (node rebooted: %v): route and subnet.env %v after flannel's start", reboot, time.Since(a.fl.Started).Round(time.Millisecond))
	if got := a.subnetEnv(); got != env {
		t.Errorf("subnet.env offline %q, online %q", got, env)
	}
	eventually(t, 30*time.Second, "pod to pod offline", func() error { return podToPod(a, b, port) })
	// flannel's start ends with its node status patch (NetworkUnavailable false); then it runs.
	eventually(t, 60*time.Second, "flannel finished starting offline", func() error {
		if !strings.Contains(since(), "Waiting for all goroutines to exit") {
			return errorf("flannel still starting")
		}
		return nil
	})
	if strings.Contains(since(), "CompleteLease execute error") {
		t.Errorf("flannel's node status patch failed offline:\n%s", tailString(since(), 3000))
	}
	n := nodePatches(t, a.hub) - patches
	t.Logf("flannel's node patches offline: %v", n)
	if n > 2 {
		t.Errorf("flannel patched its node %v times offline", n)
	}
	if !a.fl.Running() {
		t.Fatalf("flanneld exited offline:\n%s", tailString(a.fl.Log(), 3000))
	}
}
