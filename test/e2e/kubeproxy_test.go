package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"nodehub/e2e/harness"
)

// Issue 30: does `curl http://<ClusterIP>` reach my pod after the node rebooted offline? The real
// kube-proxy (of the control plane's release) in a network namespace of its own, talking only to
// nodehub, programs the kernel's rules (iptables mode on the default release, nftables mode on the
// other; both on each with NODEHUB_E2E_KUBEPROXY_BOTH=1); the slices come from the real EndpointSlice controller; kubelet's status writes go
// through the hub. Online, the ClusterIP reaches this node's two ready pods only (a third, on
// another node, is not ready). The link is black-holed and the node reboots: a new namespace,
// the pods at new addresses (web-1 not ready yet), kube-proxy started offline. From kubelet's
// status write on, the ClusterIP and the NodePort reach web-0 at its new address and never web-1,
// and real CoreDNS (restarted offline too; its own ServiceAccount on the hub's secure port)
// resolves the headless Service's name to web-0's new address alone.
// The link returns and the controller catches up: no connection reaches a dead address after it
// (before the fix, about one in two runs did for ~1 s: the shared store's watch was sent the
// cloud's stale slice), none fails; web-1, reported ready, is reached soon after the cloud's
// slice says so; kube-proxy never restarts.
func TestKubeProxyThroughOfflineReboot(t *testing.T) {
	eachRelease(t, func(t *testing.T, c *harness.Cluster) {
		// Each mode once, each release once (CI's time): nftables on the other release, iptables
		// on the default one; NODEHUB_E2E_KUBEPROXY_BOTH=1 runs both modes on every release.
		modes := []string{"nftables"}
		if c.Release.Name == cluster.Release.Name {
			modes = []string{"iptables"}
		}
		if os.Getenv("NODEHUB_E2E_KUBEPROXY_BOTH") != "" {
			modes = []string{"nftables", "iptables"}
		}
		for _, mode := range modes {
			t.Run(mode, func(t *testing.T) { kubeProxyThroughOfflineReboot(t, c, mode) })
		}
	})
}

// kpRun is one run of the scenario: the cloud's side, the hub, the node network and its sampler.
type kpRun struct {
	t                   *testing.T
	ctx                 context.Context
	c                   *harness.Cluster
	bin, mode, ns       string
	svc                 *corev1.Service
	uids                map[string]types.UID
	relay               *harness.Relay
	h                   *harness.Hub
	kubelet             kubernetes.Interface
	clusterIP, nodePort string
	node                *kpNode
	sampler             *kpSampler
	dns                 *harness.CoreDNS
}

func kubeProxyThroughOfflineReboot(t *testing.T, c *harness.Cluster, mode string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin, err := c.Release.KubeProxy()
	if err != nil {
		t.Fatal(err)
	}
	r := &kpRun{t: t, ctx: ctx, c: c, bin: bin, mode: mode, ns: "kubeproxy-" + mode}
	r.svc, r.uids = kpCloud(t, ctx, c, r.ns)
	if r.relay, err = harness.NewRelay(strings.TrimPrefix(c.APIServers[0].URL, "https://")); err != nil {
		t.Fatal(err)
	}
	defer r.relay.Close()
	approve, stop := context.WithCancel(ctx)
	defer stop()
	go c.ApproveServingCSRs(approve) // the secure port's certificate, for CoreDNS
	r.h = startHubOn(t, c, t.TempDir(), r.relay.URL(), "--heartbeat-timeout-seconds=1")
	r.startCoreDNS()
	r.kubelet = r.h.Client(kubeletUA, true)
	if _, err := r.kubelet.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + harness.NodeName}); err != nil {
		t.Fatal(err)
	}
	r.clusterIP = fmt.Sprintf("%s:%d", r.svc.Spec.ClusterIP, r.svc.Spec.Ports[0].Port)
	r.nodePort = fmt.Sprintf("%s:%d", kpNodeIP, r.svc.Spec.Ports[0].NodePort)
	r.online()
	wrote := r.rebootOffline()
	returned, readyWrite := r.linkReturns()
	r.sampler.end()
	kpCheckSamples(t, r.sampler, wrote, returned, readyWrite)
	if !r.node.proxy.Running() {
		t.Fatalf("kube-proxy exited after the return")
	}
}

// report sends kubelet's status write of a pod through the hub.
func (r *kpRun) report(name, ip string, ready bool) error {
	return kubeletPodStatus(r.ctx, r.kubelet, r.ns, name, r.uids[name], ip, ready)
}

// online: this node's ready pods answer, never the one on another node.
func (r *kpRun) online() {
	t := r.t
	r.node = bootKPNode(t, strings.TrimPrefix(r.h.ProxyURL, "http://"), map[string]string{"10.244.7.10": "web-0", "10.244.7.11": "web-1"})
	r.node.startKubeProxy(r.bin, r.mode)
	r.node.synced(90 * time.Second)
	r.sampler = startKPSampler(t, r.node, r.clusterIP)
	eventually(t, 60*time.Second, "online: the ClusterIP reaches web-0 and web-1", func() error {
		seen := map[string]bool{}
		for _, x := range r.sampler.since(time.Time{}) {
			if x.err == nil {
				seen[strings.Fields(x.who)[0]] = true
			}
		}
		if !seen["web-0"] || !seen["web-1"] {
			return fmt.Errorf("answered so far: %v", seen)
		}
		return nil
	})
	onlineAt := time.Now()
	r.count("online: 20 connections", onlineAt, 20)
	for _, x := range r.sampler.since(onlineAt) {
		if x.err != nil || !strings.HasPrefix(x.who, "web-0 10.244.7.10") && !strings.HasPrefix(x.who, "web-1 10.244.7.11") {
			t.Fatalf("online: a connection to the ClusterIP at %v: %q %v", x.at, x.who, x.err)
		}
	}
	r.headless("online", "10.244.7.10", "10.244.7.11")
	cacheWritten(t, r.h)
}

// startCoreDNS runs real CoreDNS on the hub's secure port with a ServiceAccount token of its own.
func (r *kpRun) startCoreDNS() {
	t := r.t
	waitServingOn(t, r.c, r.h)
	bin, err := harness.CoreDNSBinary()
	if err != nil {
		t.Fatal(err)
	}
	token := corednsSAToken(t, r.c, r.ns)
	r.dns, err = harness.StartCoreDNS(harness.CoreDNSOptions{Bin: bin, Dir: t.TempDir(), Server: r.h.SecureURL, CAFile: r.c.PKI.CAFile, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.dns.Stop()
		if t.Failed() {
			t.Logf("coredns log (tail):\n%s", tailString(r.dns.Log(), 3000))
		}
	})
}

// headless waits until CoreDNS resolves the headless Service's name to addrs (the ready pods).
func (r *kpRun) headless(when string, addrs ...string) {
	name := "web-headless." + r.ns + ".svc.cluster.local."
	eventually(r.t, 60*time.Second, when+": CoreDNS resolves "+name+" to "+strings.Join(addrs, ","), func() error {
		got, err := r.dns.Lookup(r.ctx, name)
		if err != nil {
			return err
		}
		slices.Sort(got)
		if !slices.Equal(got, addrs) {
			return fmt.Errorf("%v", got)
		}
		return nil
	})
}

// count waits for n samples made since from.
func (r *kpRun) count(what string, from time.Time, n int) {
	eventually(r.t, 60*time.Second, what, func() error {
		if got := len(r.sampler.since(from)); got < n {
			return fmt.Errorf("%d", got)
		}
		return nil
	})
}

// reached waits for the first sample made since from that answered with prefix.
func (r *kpRun) reached(what string, from time.Time, prefix string) kpSample {
	var x kpSample
	eventually(r.t, 60*time.Second, what, func() error {
		var ok bool
		if x, ok = r.sampler.first(from, prefix); !ok {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	return x
}

// rebootOffline black-holes the link and reboots the node: the pods come back at new addresses
// (web-1 not ready), kube-proxy starts offline; it returns when kubelet's status writes went.
func (r *kpRun) rebootOffline() time.Time {
	t := r.t
	blackHole(t, r.h, r.relay)
	r.sampler.on(nil)
	r.node.shutdown()
	r.dns.Stop()
	r.node = bootKPNode(t, strings.TrimPrefix(r.h.ProxyURL, "http://"), map[string]string{"10.244.7.20": "web-0", "10.244.7.21": "web-1", "10.244.7.30": "web-0"},
		"10.244.7.10", "10.244.7.11")
	r.node.startKubeProxy(r.bin, r.mode)
	r.node.synced(90 * time.Second)
	r.sampler.on(r.node)
	if err := r.dns.Start(); err != nil {
		t.Fatal(err)
	}
	r.reached("offline: kube-proxy programmed the cached slice (the ClusterIP reaches a dead address)", time.Now(), "dead")
	wrote := time.Now()
	for _, w := range []want{{"web-0", "10.244.7.20", true, true}, {"web-1", "10.244.7.21", false, false}} {
		if err := r.report(w.pod, w.addr, w.ready); err != nil {
			t.Fatalf("kubelet's offline status write of %s: %v", w.pod, err)
		}
	}
	x := r.reached("offline: the ClusterIP reaches web-0 at its new address", wrote, "web-0 10.244.7.20")
	t.Logf("%s offline: kubelet's status write to the first connection to the ClusterIP reaching web-0's new address: %v",
		r.mode, x.at.Sub(wrote).Round(time.Millisecond))
	eventually(t, 30*time.Second, "offline: the NodePort reaches web-0 at its new address", func() error {
		who, err := r.node.dial(r.nodePort)
		if err != nil || !strings.HasPrefix(who, "web-0 10.244.7.20") {
			return fmt.Errorf("%q %v", who, err)
		}
		return nil
	})
	r.headless("offline", "10.244.7.20")
	r.sampler.steady(t, "offline: the ClusterIP reaches web-0 at its new address only", "web-0 10.244.7.20")
	kpFigure(t, r.sampler, r.mode, func(addr string) error { return r.report("web-0", addr, true) })
	r.sampler.steady(t, "offline: the ClusterIP reaches web-0 at 10.244.7.20 only", "web-0 10.244.7.20")
	return wrote
}

// linkReturns: kubelet's status write of web-0 reaches the cloud, whose controller catches up;
// then web-1 turns ready, as kubelet reports through the hub. It returns when the hub was back
// online and when kubelet's write of web-1 ready left.
func (r *kpRun) linkReturns() (returned, readyWrite time.Time) {
	t := r.t
	if err := r.relay.Pass(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "hub back online", func() error {
		if v, _ := r.h.Metric(fmt.Sprintf(`nodehub_server_healthy{server="%s"}`, r.relay.Addr)); v != 1 {
			return fmt.Errorf("server not healthy yet")
		}
		return nil
	})
	returned = time.Now()
	eventually(t, 30*time.Second, "kubelet's status write of web-0 reaches the cloud", func() error {
		return r.report("web-0", "10.244.7.20", true)
	})
	services := []string{r.svc.Name}
	eventually(t, 60*time.Second, "the cloud's slice caught up with web-0", func() error {
		return listed(r.ctx, r.c.Admin, r.ns, services, want{"web-0", "10.244.7.20", true, true})
	})
	readyWrite = time.Now()
	if err := r.report("web-1", "10.244.7.21", true); err != nil {
		t.Fatalf("kubelet's status write of web-1 ready: %v", err)
	}
	eventually(t, 60*time.Second, "the cloud's slice has web-1 ready", func() error {
		return listed(r.ctx, r.c.Admin, r.ns, services, want{"web-0", "10.244.7.20", true, true}, want{"web-1", "10.244.7.21", true, true})
	})
	cloudAt := time.Now()
	// Generous for a loaded machine, yet well short of the corrections' 2-minute bound.
	x := r.reached("the ClusterIP reaches web-1 once the cloud's slice says it is ready", cloudAt, "web-1 10.244.7.21")
	t.Logf("%s: web-1 reached %v after the cloud's slice said it is ready", r.mode, x.at.Sub(cloudAt).Round(time.Millisecond))
	r.count("50 connections after the return (none may reach a dead address)", returned, 50)
	return returned, readyWrite
}

// kpCheckSamples: from kubelet's offline write on, no connection reached web-1 before kubelet
// reported it ready (readyWrite); after the return, none reached a dead address or failed.
func kpCheckSamples(t *testing.T, s *kpSampler, wrote, returned, readyWrite time.Time) {
	t.Helper()
	n := 0
	for _, x := range s.since(wrote) {
		switch {
		case x.err == nil && strings.HasPrefix(x.who, "web-1") && x.at.Before(readyWrite):
			t.Errorf("%v: a connection reached web-1, not ready (%s after kubelet's write)", x.at, x.at.Sub(wrote))
		case !x.at.Before(returned) && x.err == nil && strings.HasPrefix(x.who, "dead"):
			t.Errorf("%v: a connection reached a dead address %s after the return: %s", x.at, x.at.Sub(returned), x.who)
		case !x.at.Before(returned) && x.err != nil:
			t.Errorf("%v: a connection failed %s after the return: %v", x.at, x.at.Sub(returned), x.err)
		}
		if !x.at.Before(returned) {
			n++
		}
	}
	t.Logf("%d connections after the return", n)
}

// kpCloud makes the cloud's side: this node (and RBAC for kube-proxy's reads as the node), the
// EndpointSlice controller, web-0 and web-1 ready on this node, web-2 on another node not ready,
// and a NodePort Service selecting them; it waits for the controller's slice.
func kpCloud(t *testing.T, ctx context.Context, c *harness.Cluster, ns string) (*corev1.Service, map[string]types.UID) {
	t.Helper()
	if err := c.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if err := c.BindNodes(ctx, "e2e-kube-proxy", rbacv1.PolicyRule{APIGroups: []string{"", "discovery.k8s.io", "networking.k8s.io", "events.k8s.io"},
		Resources: []string{"services", "endpointslices", "servicecidrs", "nodes", "events"}, Verbs: []string{"get", "list", "watch", "create", "patch"}}); err != nil {
		t.Fatal(err)
	}
	kcm, err := c.StartControllerManager(ctx, harness.ControllerOptions{Controllers: append(slices.Clone(harness.DefaultControllers), "endpointslice")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kcm.Stop()
		if t.Failed() {
			t.Logf("kube-controller-manager log:\n%s", tailString(kcm.Log(), 3000))
		}
	})
	for _, name := range []string{harness.NodeName, "edge-elsewhere"} {
		if _, err := c.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		bg := context.Background()
		zero := int64(0)
		_ = c.Admin.CoreV1().Pods(ns).DeleteCollection(bg, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		_ = c.Admin.CoreV1().Services(ns).Delete(bg, "web", metav1.DeleteOptions{})
		_ = c.Admin.CoreV1().Services(ns).Delete(bg, "web-headless", metav1.DeleteOptions{})
	})
	uids := map[string]types.UID{}
	for _, p := range []struct {
		name, node, ip string
		ready          bool
	}{{"web-0", harness.NodeName, "10.244.7.10", true}, {"web-1", harness.NodeName, "10.244.7.11", true}, {"web-2", "edge-elsewhere", "10.244.8.12", false}} {
		uids[p.name] = kpPod(t, ctx, c, ns, p.name, p.node, p.ip, p.ready)
	}
	svc, err := c.Admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt(kpPodPort)}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web-headless"},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt(kpPodPort)}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the EndpointSlice controller's slice", func() error {
		return listed(ctx, c.Admin, ns, []string{"web"}, want{"web-0", "10.244.7.10", true, true}, want{"web-1", "10.244.7.11", true, true},
			want{"web-2", "10.244.8.12", false, false})
	})
	return svc, uids
}

// kpPod creates a pod of the Service on node, running at ip, ready or not, as its kubelet says.
func kpPod(t *testing.T, ctx context.Context, c *harness.Cluster, ns, name, node, ip string, ready bool) types.UID {
	t.Helper()
	p := newPod(ns, name)
	p.Spec.NodeName = node
	p.Labels = map[string]string{"app": "web"}
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: kpPodPort}}
	created, err := c.Admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}}
	updated, err := c.Admin.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return updated.UID
}

// kpFigure times kpFigureRuns offline status writes of web-0, at 10.244.7.30 and back at
// 10.244.7.20 in turn (it ends at .20): from the write to the first connection to the ClusterIP
// that reaches the reported address; it logs the median and the worst.
func kpFigure(t *testing.T, s *kpSampler, mode string, report func(addr string) error) {
	t.Helper()
	n := kpFigureRuns()
	if n <= 0 {
		return
	}
	var took []time.Duration
	for i := 0; i < n; i++ {
		addr := "10.244.7.30"
		if i%2 == 1 {
			addr = "10.244.7.20"
		}
		at := time.Now()
		if err := report(addr); err != nil {
			t.Fatal(err)
		}
		var x kpSample
		eventually(t, 30*time.Second, "offline: the ClusterIP reaches web-0 at "+addr, func() error {
			var ok bool
			if x, ok = s.first(at, "web-0 "+addr); !ok {
				return fmt.Errorf("not yet")
			}
			return nil
		})
		took = append(took, x.at.Sub(at))
	}
	if n%2 == 1 {
		if err := report("10.244.7.20"); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(took)
	t.Logf("FIGURE %s offline, kubelet's status write → first ClusterIP connection at the new address, %d writes: median %v, worst %v",
		mode, n, took[n/2].Round(time.Millisecond), took[n-1].Round(time.Millisecond))
}
