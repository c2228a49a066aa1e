package e2e

import (
	"context"
	"maps"
	"os"
	"strconv"
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
// cloud and both subnet.env files are as before. Last, node A reboots offline with another
// address: flannel writes its new public-ip annotation offline once, and finds it in the hub's
// cache at its next restart. One release (the shared control plane); ~15 s.
func TestFlannelOffline(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	ctx := context.Background()
	bin, err := harness.FlannelBinary()
	if err != nil {
		t.Fatal(err)
	}
	startControllerManagerOn(t, cluster, 0) // signs the hubs' serving certificates
	approveServing(t, "system:node:flannel-a", "system:node:flannel-b")
	token := flannelToken(t, ctx)
	a, b := flannelNodes(t, ctx)
	const port = 8080
	for _, n := range []*flannelNode{a, b} {
		startNodeHub(t, n)
		startFlannel(t, n, bin, token)
		servePod(t, n, port)
	}
	before := flannelOnline(t, ctx, a, b, port)

	// bench -only flannel asks for more restarts of each kind, for a median.
	restarts, _ := strconv.Atoi(os.Getenv("NODEHUB_FLANNEL_RESTARTS"))
	for _, reboot := range []bool{false, true} {
		for i := 0; i < max(restarts, 1); i++ {
			// Its Node's status once; its annotations are the cached ones.
			flannelOfflineRestart(t, a, b, port, offlineRestart{reboot: reboot, patches: 1})
		}
	}

	flannelReturn(t, ctx, a, b, port, before)

	// Node A back from an offline reboot with another address (DHCP's): flannel restarted offline
	// writes its new public-ip annotation through nodes/status, answered and kept in its copy as
	// the apiserver keeps it; restarted again, it finds it there and writes its status alone.
	flannelOfflineRestart(t, a, b, port, offlineRestart{reboot: true, addr: "10.251.0.3/24", patches: 2})
	flannelOfflineRestart(t, a, b, port, offlineRestart{patches: 1})
}

// flannelOnline waits until flannel has programmed both nodes and pods on the two reach each
// other, checks flannel's annotations reached the cloud through the hub, and returns what must not
// change through an outage: by node, flannel's annotations and the podCIDR in the cloud, and its
// subnet.env.
func flannelOnline(t *testing.T, ctx context.Context, a, b *flannelNode, port int) map[string]map[string]string {
	t.Helper()
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
	state := map[string]map[string]string{}
	for _, n := range []*flannelNode{a, b} {
		state[n.name] = flannelAnnotations(t, ctx, n.name)
		if state[n.name]["flannel.alpha.coreos.com/public-ip"] != n.gateway() || state[n.name]["flannel.alpha.coreos.com/backend-type"] != "host-gw" {
			t.Fatalf("flannel's annotations of %s in the cloud: %v", n.name, state[n.name])
		}
		state[n.name]["subnet.env"] = n.subnetEnv()
	}
	cacheWritten(t, a.hub)
	return state
}

// flannelReturn lets a's link pass again and checks nothing was re-allocated: each Node's podCIDR
// and flannel annotations in the cloud and each subnet.env are as before, a still routes b's pods.
func flannelReturn(t *testing.T, ctx context.Context, a, b *flannelNode, port int, before map[string]map[string]string) {
	t.Helper()
	if err := a.relay.Pass(); err != nil {
		t.Fatal(err)
	}
	hubHealth(t, a, 1)
	eventually(t, 30*time.Second, "pod to pod after the return", func() error { return podToPod(a, b, port) })
	for _, n := range []*flannelNode{a, b} {
		got := flannelAnnotations(t, ctx, n.name)
		got["subnet.env"] = n.subnetEnv()
		if !maps.Equal(got, before[n.name]) {
			t.Errorf("%s after the return: %v, before: %v", n.name, got, before[n.name])
		}
	}
	if err := a.programmed(b); err != nil {
		t.Error(err)
	}
}

// offlineRestart is one restart of node a's flannel offline.
type offlineRestart struct {
	reboot  bool   // the hub restarts too (the node rebooted offline)
	addr    string // when set, a's new address on the segment (DHCP's, after a reboot)
	patches int    // the node patches flannel sends: its status, and its annotations if they changed
}

// flannelOfflineRestart restarts node a's flannel offline, with its subnet.env and route to b
// gone, and checks flannel comes back from the hub's cache: the same subnet.env, the route,
// pod-to-pod traffic (unless a's address changed: b still routes a's pods to the old one), its
// node patches all answered 200, and it keeps running.
func flannelOfflineRestart(t *testing.T, a, b *flannelNode, port int, r offlineRestart) {
	t.Helper()
	env := a.subnetEnv()
	flannelOfflineStop(t, a, b, r)
	patches, patchesOK := nodePatches(t, a.hub)
	mark := len(a.fl.Log())
	since := func() string { return a.fl.Log()[mark:] }
	if err := a.fl.Start(); err != nil {
		t.Fatal(err)
	}
	moved := "" // bench's figures leave out the restarts after the address changed
	if a.moved != "" {
		moved = ", new address"
	}
	t.Logf("flannel restart offline, routes programmed (hub restarted too: %v%s): %v", r.reboot, moved, untilProgrammed(t, a, b))
	if got := a.subnetEnv(); got != env {
		t.Errorf("subnet.env offline %q, online %q", got, env)
	}
	if a.moved == "" {
		eventually(t, 30*time.Second, "pod to pod offline", func() error { return podToPod(a, b, port) })
	}
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
	all, ok := nodePatches(t, a.hub)
	t.Logf("flannel's node patches offline: %v, answered 200: %v", all-patches, ok-patchesOK)
	if all-patches != float64(r.patches) || all-patches != ok-patchesOK {
		t.Errorf("flannel patched its node %v times offline (want %d), %v answered 200", all-patches, r.patches, ok-patchesOK)
	}
	if !a.fl.Running() {
		t.Fatalf("flanneld exited offline:\n%s", tailString(a.fl.Log(), 3000))
	}
}

// flannelOfflineStop stops a's flannel, black-holes a's link (and restarts its hub when r.reboot),
// gives it r.addr, and removes flannel's route to b and its subnet.env.
func flannelOfflineStop(t *testing.T, a, b *flannelNode, r offlineRestart) {
	t.Helper()
	a.fl.Stop()
	if err := a.relay.BlackHole(); err != nil {
		t.Fatal(err)
	}
	if r.reboot {
		a.hub.Stop()
		if err := a.hub.Start(); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "hub restarted offline serving", func() error { return a.secureServing(context.Background()) })
	}
	hubHealth(t, a, 0)
	if r.addr != "" {
		a.ns.mustRunIP(t, "addr", "del", a.addr, "dev", a.link()) // first: it takes its secondaries along
		a.ns.mustRunIP(t, "addr", "add", r.addr, "dev", a.link())
		a.moved, a.addr = a.addr, r.addr
	}
	if ok, _, _ := a.ns.routesVia(b.podCIDR, b.gateway()); ok {
		a.ns.mustRunIP(t, "route", "del", b.podCIDR)
	}
	if err := os.Remove(a.fl.SubnetFile); err != nil {
		t.Fatal(err)
	}
}

// untilProgrammed waits until a's flannel, just started, has written its subnet.env and routes b's
// pod subnet, and returns how long that took from its start (polled every 20 ms: the figure bench
// -only flannel reports).
func untilProgrammed(t *testing.T, a, b *flannelNode) time.Duration {
	t.Helper()
	deadline := a.fl.Started.Add(60 * time.Second)
	for {
		err := a.programmed(b)
		if err == nil {
			return time.Since(a.fl.Started).Round(time.Millisecond)
		}
		if time.Now().After(deadline) {
			t.Fatalf("flannel restarted offline not programmed within 60s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
