package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"

	"nodehub/e2e/harness"
)

// sliceWatcher is a kube-proxy- or CoreDNS-like reader of EndpointSlices: an informer (list, then
// watch, again after each end, re-listing when told to), keeping the slices as they are now and
// every address any event or list brought.
type sliceWatcher struct {
	name string
	mu   sync.Mutex
	now  map[string]*discoveryv1.EndpointSlice
	seen map[string]bool // addresses of the node's pods named since mark
	mods int             // updates received
}

func watchSlices(t *testing.T, ctx context.Context, name string, cs kubernetes.Interface, ns string) *sliceWatcher {
	t.Helper()
	w := &sliceWatcher{name: name, now: map[string]*discoveryv1.EndpointSlice{}, seen: map[string]bool{}}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := f.Discovery().V1().EndpointSlices().Informer()
	put := func(obj any, update bool) {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.now[s.Name] = s
		if update {
			w.mods++
		}
		for _, e := range s.Endpoints {
			if e.NodeName != nil && *e.NodeName == harness.NodeName {
				for _, a := range e.Addresses {
					w.seen[a] = true
				}
			}
		}
	}
	_, _ = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { put(o, false) },
		UpdateFunc: func(_, o any) { put(o, true) },
		DeleteFunc: func(o any) {
			if s, ok := o.(*discoveryv1.EndpointSlice); ok {
				w.mu.Lock()
				delete(w.now, s.Name)
				w.mu.Unlock()
			}
		},
	})
	f.Start(ctx.Done())
	return w
}

// mark forgets the addresses seen so far.
func (w *sliceWatcher) mark() {
	w.mu.Lock()
	clear(w.seen)
	w.mu.Unlock()
}

func (w *sliceWatcher) saw(addr string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen[addr]
}

// endpoint returns pod's endpoint in service's slice as the watcher holds it.
func (w *sliceWatcher) endpoint(service, pod string) (discoveryv1.Endpoint, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.now {
		if s.Labels[discoveryv1.LabelServiceName] == service {
			if e, ok := endpointOf(s, pod); ok {
				return e, true
			}
		}
	}
	return discoveryv1.Endpoint{}, false
}

func endpointOf(s *discoveryv1.EndpointSlice, pod string) (discoveryv1.Endpoint, bool) {
	for _, e := range s.Endpoints {
		if e.TargetRef != nil && e.TargetRef.Name == pod {
			return e, true
		}
	}
	return discoveryv1.Endpoint{}, false
}

// want is one endpoint as a reader must see it.
type want struct {
	pod, addr    string
	ready, serve bool
}

func (x want) check(e discoveryv1.Endpoint, ok bool) error {
	switch {
	case !ok:
		return fmt.Errorf("%s: no endpoint", x.pod)
	case !slices.Equal(e.Addresses, []string{x.addr}):
		return fmt.Errorf("%s: addresses %v, want %s", x.pod, e.Addresses, x.addr)
	case e.Conditions.Ready == nil || *e.Conditions.Ready != x.ready || e.Conditions.Serving == nil || *e.Conditions.Serving != x.serve:
		return fmt.Errorf("%s: ready %v serving %v, want %v/%v", x.pod, deref(e.Conditions.Ready), deref(e.Conditions.Serving), x.ready, x.serve)
	}
	return nil
}

func deref(b *bool) any {
	if b == nil {
		return nil
	}
	return *b
}

// listed checks a list of slices (through a client) against wants for every service.
func listed(ctx context.Context, cs kubernetes.Interface, ns string, services []string, wants ...want) error {
	l, err := cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, svc := range services {
		found := false
		for i := range l.Items {
			s := &l.Items[i]
			if s.Labels[discoveryv1.LabelServiceName] != svc {
				continue
			}
			found = true
			for _, x := range wants {
				e, ok := endpointOf(s, x.pod)
				if err := x.check(e, ok); err != nil {
					return fmt.Errorf("list, service %s: %w", svc, err)
				}
			}
		}
		if !found {
			return fmt.Errorf("list: no slice of service %s", svc)
		}
	}
	return nil
}

// watched checks what each watcher holds now against wants for every service.
func watched(ws []*sliceWatcher, services []string, wants ...want) error {
	for _, w := range ws {
		for _, svc := range services {
			for _, x := range wants {
				e, ok := w.endpoint(svc, x.pod)
				if err := x.check(e, ok); err != nil {
					return fmt.Errorf("%s watch, service %s: %w", w.name, svc, err)
				}
			}
		}
	}
	return nil
}

// v1Endpoints checks a service's v1 Endpoints (through a client) against wants: the address in
// addresses when ready, in notReadyAddresses when not.
func v1Endpoints(ctx context.Context, cs kubernetes.Interface, ns, name string, wants ...want) error {
	e, err := cs.CoreV1().Endpoints(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, x := range wants {
		found := false
		for _, ss := range e.Subsets {
			for ready, as := range map[bool][]corev1.EndpointAddress{true: ss.Addresses, false: ss.NotReadyAddresses} {
				for _, a := range as {
					if a.TargetRef == nil || a.TargetRef.Name != x.pod {
						continue
					}
					if a.IP != x.addr || ready != x.ready {
						return fmt.Errorf("endpoints %s: %s at %s ready %v, want %s ready %v", name, x.pod, a.IP, ready, x.addr, x.ready)
					}
					found = true
				}
			}
		}
		if !found {
			return fmt.Errorf("endpoints %s: no address of %s", name, x.pod)
		}
	}
	return nil
}

// cleanupPods removes the test's pods and Services when it ends (they are bound to nodes other
// tests use; no namespace controller runs).
func cleanupPods(t *testing.T, ns string) {
	t.Cleanup(func() {
		ctx := context.Background()
		zero := int64(0)
		_ = cluster.Admin.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		svcs, err := cluster.Admin.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, s := range svcs.Items {
				_ = cluster.Admin.CoreV1().Services(ns).Delete(ctx, s.Name, metav1.DeleteOptions{})
			}
		}
	})
}

// kubeletPodStatus sends a pod's status as kubelet's status manager does (syncPod): it reads the
// pod (through the hub), and sends a strategic merge patch of pods/<name>/status from the status
// read to the new one (statusutil.PatchPodStatus), with the pod's uid as precondition, in
// kubelet's User-Agent.
func kubeletPodStatus(ctx context.Context, kubelet kubernetes.Interface, ns, name string, uid types.UID, ip string, ready bool) error {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	pod, err := kubelet.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	old := pod.Status
	cur := *old.DeepCopy()
	cur.PodIP, cur.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	cur.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: metav1.Now()}}
	oldJSON, err := json.Marshal(corev1.Pod{Status: old})
	if err != nil {
		return err
	}
	newJSON, err := json.Marshal(corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid}, Status: cur})
	if err != nil {
		return err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, corev1.Pod{})
	if err != nil {
		return err
	}
	_, err = kubelet.CoreV1().Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// createReadyPod creates p and sets its status as a kubelet would: running and ready at ip.
func createReadyPod(t *testing.T, ctx context.Context, p *corev1.Pod, ip string) *corev1.Pod {
	t.Helper()
	created, err := cluster.Admin.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	updated, err := cluster.Admin.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return updated
}

// readersHave checks that every watcher has seen, and every reader lists, the wanted endpoints.
func readersHave(ctx context.Context, ws []*sliceWatcher, readers map[string]kubernetes.Interface, ns string, services []string, wants ...want) error {
	if err := watched(ws, services, wants...); err != nil {
		return err
	}
	for name, cs := range readers {
		if err := listed(ctx, cs, ns, services, wants...); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// After an offline reboot the node's pods come back with new IPs, not ready for a while. The
// slices come from the real EndpointSlice controller; kubelet's status writes go through the hub
// while the link is black-holed; kube-proxy-like readers (JSON and protobuf, list and watch) and
// a CoreDNS-like one with its own ServiceAccount on the secure port follow the pods; a hub
// restarted offline does too; on the return no reader is sent the dead IP again.
func TestEndpointsFollowKubeletOffline(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := "epfix"
	if err := cluster.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	cleanupPods(t, ns)
	bindNodes(t, "e2e-proxy-reader", rbacv1.PolicyRule{APIGroups: []string{"", "discovery.k8s.io"}, Resources: []string{"services", "endpointslices"}, Verbs: []string{"get", "list", "watch"}})
	bindNodes(t, "e2e-endpoints-reader", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"endpoints"}, Verbs: []string{"get", "list", "watch"}})
	kcm, err := cluster.StartControllerManager(ctx, harness.ControllerOptions{Controllers: append(slices.Clone(harness.DefaultControllers), "endpointslice", "endpoint")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kcm.Stop()
		if t.Failed() {
			t.Logf("kube-controller-manager log:\n%s", tailString(kcm.Log(), 3000))
		}
	})
	go cluster.ApproveServingCSRs(ctx)

	// The nodes (the controller leaves out pods of nodes it does not know), three pods of "web":
	// two on this node, one on another.
	for _, n := range []string{harness.NodeName, "edge-2"} {
		if _, err := cluster.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	ips := map[string]string{"web-1": "10.244.1.1", "web-2": "10.244.1.2", "web-3": "10.244.2.3"}
	uids := map[string]types.UID{}
	for _, name := range []string{"web-1", "web-2", "web-3"} {
		p := newPod(ns, name)
		p.Labels = map[string]string{"app": "web"}
		if name == "web-3" {
			p.Spec.NodeName = "edge-2"
		}
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080}}
		uids[name] = createReadyPod(t, ctx, p, ips[name]).UID
	}
	services := []string{"web", "web-headless"}
	for _, svc := range services {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: svc}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt(8080)}}}}
		if svc == "web-headless" {
			s.Spec.ClusterIP = corev1.ClusterIPNone
		}
		if _, err := cluster.Admin.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	before := []want{{"web-1", "10.244.1.1", true, true}, {"web-2", "10.244.1.2", true, true}, {"web-3", "10.244.2.3", true, true}}
	eventually(t, 60*time.Second, "the EndpointSlice controller's slices", func() error {
		return listed(ctx, cluster.Admin, ns, services, before...)
	})

	// CoreDNS's ServiceAccount, allowed to read Services and slices.
	sa := "coredns"
	if _, err := cluster.Admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "dns-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"", "discovery.k8s.io"}, Resources: []string{"services", "endpointslices"}, Verbs: []string{"get", "list", "watch"}}}}
	if _, err := cluster.Admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "dns-reader"}, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "dns-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}}
	if _, err := cluster.Admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tr, err := cluster.Admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	relay, err := harness.NewRelay(strings.TrimPrefix(cluster.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Refuse()
	h := startHubServers(t, relay.URL(), "--heartbeat-timeout-seconds=1")
	waitServing(t, h)
	kubelet := h.Client(kubeletUA, true)
	proxyJSON, proxyPB := h.Client(kubeProxyUA, false), h.Client(kubeProxyUA, true)
	dns := kubernetes.NewForConfigOrDie(podConfig(h, tr.Status.Token))
	readers := map[string]kubernetes.Interface{"kube-proxy json": proxyJSON, "kube-proxy protobuf": proxyPB, "coredns": dns}
	var ws []*sliceWatcher
	for _, name := range []string{"kube-proxy json", "kube-proxy protobuf", "coredns"} {
		ws = append(ws, watchSlices(t, ctx, name, readers[name], ns))
	}
	// Online: every reader has the cloud's slices (and the hub its copy of the node's pods).
	if _, err := kubelet.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + harness.NodeName}); err != nil {
		t.Fatal(err)
	}
	// web-4 comes to this node after kubelet's list and after the hub's own start-up re-list of
	// the node's pods: kubelet's cached pod list does not hold it.
	eventually(t, 60*time.Second, "the hub's start-up re-list of the node's pods", func() error {
		if !strings.Contains(h.Log(), "this node's pods re-listed") {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	p4 := newPod(ns, "web-4")
	p4.Labels = map[string]string{"app": "web"}
	createReadyPod(t, ctx, p4, "10.244.1.4")
	before = append(before, want{"web-4", "10.244.1.4", true, true})
	eventually(t, 30*time.Second, "online: the readers have the cloud's slices", func() error {
		return readersHave(ctx, ws, readers, ns, services, before...)
	})

	// v1 Endpoints too (the Endpoints controller's), as a CNI agent reads them.
	eventually(t, 30*time.Second, "online: v1 Endpoints", func() error { return v1Endpoints(ctx, proxyJSON, ns, "web", before...) })

	// The link goes black.
	blackHole(t, h, relay)

	// The node reboots: web-1 comes back with a new IP, not ready yet, as kubelet reports it.
	if err := kubeletPodStatus(ctx, kubelet, ns, "web-1", uids["web-1"], "10.244.1.11", false); err != nil {
		t.Fatalf("kubelet's offline status write: %v", err)
	}
	// kubelet does not run web-4 (not in its pod list): not ready either.
	notReady := []want{{"web-1", "10.244.1.11", false, false}, {"web-2", "10.244.1.2", true, true}, {"web-3", "10.244.2.3", true, true}, {"web-4", "10.244.1.4", false, false}}
	eventually(t, 30*time.Second, "offline: every reader's watch and list follow kubelet (not ready, new IP)", func() error {
		return readersHave(ctx, ws, readers, ns, services, notReady...)
	})
	if err := kubeletPodStatus(ctx, kubelet, ns, "web-1", uids["web-1"], "10.244.1.11", true); err != nil {
		t.Fatalf("kubelet's offline status write: %v", err)
	}
	after := []want{{"web-1", "10.244.1.11", true, true}, {"web-2", "10.244.1.2", true, true}, {"web-3", "10.244.2.3", true, true}, {"web-4", "10.244.1.4", false, false}}
	eventually(t, 30*time.Second, "offline: the readers follow kubelet (ready)", func() error {
		return readersHave(ctx, ws, readers, ns, services, after...)
	})
	if err := v1Endpoints(ctx, proxyJSON, ns, "web", after...); err != nil {
		t.Fatalf("offline v1 Endpoints: %v", err)
	}
	if err := v1Endpoints(ctx, proxyPB, ns, "web", notReady[3]); err != nil {
		t.Fatalf("offline v1 Endpoints (protobuf): %v", err)
	}
	if v, _ := h.Metric("nodehub_endpoints_corrected"); v < 2 {
		t.Fatalf("nodehub_endpoints_corrected %v, want at least 2 (web-1 in two services)", v)
	}

	// A hub restarted offline corrects from its first answer (the pool's shared store is empty:
	// the cache answers).
	dir := strings.TrimSuffix(h.CacheDir, "/cache")
	h.Stop()
	h2 := startHubIn(t, dir, relay.URL(), "--heartbeat-timeout-seconds=1")
	proxy2 := h2.Client(kubeProxyUA, true)
	if err := listed(ctx, proxy2, ns, services, after...); err != nil {
		t.Fatalf("restarted offline: %v", err)
	}
	if err := listed(ctx, h2.Client(kubeProxyUA, false), ns, services, after...); err != nil {
		t.Fatalf("restarted offline (JSON): %v", err)
	}
	w2ctx, stop2 := context.WithCancel(ctx)
	defer stop2()
	w2 := watchSlices(t, w2ctx, "kube-proxy after restart", proxy2, ns)
	eventually(t, 30*time.Second, "restarted offline: a new reader", func() error { return watched([]*sliceWatcher{w2}, services, after...) })
	w2.mark()

	// The return: the cloud's slices still name the dead IP until kubelet's status reaches the
	// cloud and the controller catches up; no reader is sent it meanwhile.
	if err := relay.Pass(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "hub back online", func() error {
		if v, _ := h2.Metric(fmt.Sprintf(`nodehub_server_healthy{server="%s"}`, relay.Addr)); v != 1 {
			return fmt.Errorf("server not healthy yet")
		}
		return nil
	})
	if err := listed(ctx, cluster.Admin, ns, services, before[0]); err != nil {
		t.Fatalf("the cloud's slices must still name web-1's old IP here: %v", err)
	}
	if err := listed(ctx, proxy2, ns, services, after[:3]...); err != nil {
		t.Fatalf("online, before kubelet's status reached the cloud: %v", err)
	}
	if v, _ := h2.Metric("nodehub_endpoints_corrected"); v < 1 {
		t.Fatalf("online before the cloud caught up: nodehub_endpoints_corrected %v", v)
	}
	kubelet2 := h2.Client(kubeletUA, true)
	eventually(t, 30*time.Second, "kubelet's status reaches the cloud", func() error {
		return kubeletPodStatus(ctx, kubelet2, ns, "web-1", uids["web-1"], "10.244.1.11", true)
	})
	// Online, the cloud's word on web-4 counts again (kubelet sees it now).
	after[3] = want{"web-4", "10.244.1.4", true, true}
	eventually(t, 60*time.Second, "the cloud caught up and the hub stopped correcting", func() error {
		if err := listed(ctx, cluster.Admin, ns, services, after...); err != nil {
			return fmt.Errorf("cloud: %w", err)
		}
		if v, _ := h2.Metric("nodehub_endpoints_corrected"); v != 0 {
			return fmt.Errorf("still correcting %v endpoints", v)
		}
		return watched([]*sliceWatcher{w2}, services, after...)
	})
	if err := listed(ctx, proxy2, ns, services, after...); err != nil {
		t.Fatalf("after the return: %v", err)
	}
	if w2.saw("10.244.1.1") {
		t.Fatal("a reader was sent the dead IP after the return")
	}
}

// A site whose uplink is down but whose LAN works: three hubs in --pool-mode=lease; kubelet of
// one node reports its pod's new IP through its hub, and kube-proxy-like readers on every node
// follow (the hubs share their nodes' reports through the pool's leader). Another node's pod is
// left as the cloud said.
func TestEndpointsPoolSharesCorrections(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := "epfix-pool"
	if err := cluster.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	cleanupPods(t, ns)
	bindNodes(t, "e2e-proxy-reader", rbacv1.PolicyRule{APIGroups: []string{"", "discovery.k8s.io"}, Resources: []string{"services", "endpointslices"}, Verbs: []string{"get", "list", "watch"}})
	bindNodes(t, "e2e-pool-election", rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"list", "watch"}})
	kcm, err := cluster.StartControllerManager(ctx, harness.ControllerOptions{Controllers: []string{"endpointslice"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kcm.Stop)
	var edges []*harness.Edge
	for i := 1; i <= 3; i++ {
		e, err := cluster.NewEdge(ctx, fmt.Sprintf("edge-p%d", i), net.IPv4(127, 0, 0, byte(20+i)), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		edges = append(edges, e)
	}
	ips := map[string]string{"web-a": "10.245.1.1", "web-b": "10.245.2.1"}
	uids := map[string]types.UID{}
	for name, node := range map[string]string{"web-a": "edge-p1", "web-b": "edge-p2"} {
		p := newPod(ns, name)
		p.Labels = map[string]string{"app": "shared"}
		p.Spec.NodeName = node
		uids[name] = createReadyPod(t, ctx, p, ips[name]).UID
	}
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "shared"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "shared"},
		Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt(8080)}}}}
	if _, err := cluster.Admin.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	services := []string{"shared"}
	before := []want{{"web-a", "10.245.1.1", true, true}, {"web-b", "10.245.2.1", true, true}}
	eventually(t, 60*time.Second, "the EndpointSlice controller's slice", func() error {
		return listed(ctx, cluster.Admin, ns, services, before...)
	})

	relay, err := harness.NewRelay(strings.TrimPrefix(cluster.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Refuse()
	var hubs []*harness.Hub
	for _, e := range edges {
		h, err := cluster.StartHub(ctx, harness.HubOptions{Bin: nodehub, Dir: e.Dir, Servers: relay.URL(),
			Args: append(e.PoolArgs("lease", harness.FreePort()), "--heartbeat-interval-seconds=1", "--heartbeat-timeout-seconds=1")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			h.Stop()
			if t.Failed() {
				t.Logf("%s log:\n%s", e.Name, tailString(h.Log(), 4000))
			}
		})
		hubs = append(hubs, h)
	}
	eventually(t, 90*time.Second, "one leader, two followers", func() error {
		roles := map[string]int{}
		for _, h := range hubs {
			for _, r := range []string{"leader", "follower"} {
				if v, _ := h.Metric(`nodehub_pool_role{role="` + r + `"}`); v == 1 {
					roles[r]++
				}
			}
		}
		if roles["leader"] != 1 || roles["follower"] != 2 {
			return fmt.Errorf("roles %v", roles)
		}
		return nil
	})
	// edge-p1's kubelet lists its pods (the hub caches them); a kube-proxy-like reader per node.
	kubelet := hubs[0].Client(kubeletUA, true)
	if _, err := kubelet.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=edge-p1"}); err != nil {
		t.Fatal(err)
	}
	var ws []*sliceWatcher
	for i, h := range hubs {
		ws = append(ws, watchSlices(t, ctx, edges[i].Name+" kube-proxy", h.Client(kubeProxyUA, true), ns))
	}
	eventually(t, 60*time.Second, "online: every node's reader has the cloud's slice", func() error { return watched(ws, services, before...) })

	if err := relay.BlackHole(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "every hub knows it is offline", func() error {
		for i, h := range hubs {
			if v, _ := h.Metric(fmt.Sprintf(`nodehub_server_healthy{server="%s"}`, relay.Addr)); v != 0 {
				return fmt.Errorf("%s: server still healthy", edges[i].Name)
			}
		}
		return nil
	})
	if err := kubeletPodStatus(ctx, kubelet, ns, "web-a", uids["web-a"], "10.245.1.11", true); err != nil {
		t.Fatalf("edge-p1 kubelet's offline status write: %v", err)
	}
	after := []want{{"web-a", "10.245.1.11", true, true}, {"web-b", "10.245.2.1", true, true}}
	eventually(t, 30*time.Second, "offline: every node's reader follows edge-p1's kubelet", func() error {
		if err := watched(ws, services, after...); err != nil {
			return err
		}
		for i, h := range hubs {
			if err := listed(ctx, h.Client(kubeProxyUA, false), ns, services, after...); err != nil {
				return fmt.Errorf("%s: %w", edges[i].Name, err)
			}
		}
		return nil
	})
}

// kubemark's hollow kubelet (the kubelet's own code, a fake runtime) restarted while the link is
// black-holed: its own status writes make the node's endpoints follow it. Before the cut the cloud
// had marked the node's pods not ready at other addresses (as the node lifecycle controller does
// for an unreachable node, here by admin while the kubelet was stopped), so the slices say so;
// after the kubelet's restart offline every reader has the pods ready at the address kubelet
// reports, while the cloud still says otherwise.
func TestEndpointsFollowHollowKubeletRestartedOffline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const node, ns = "hollow-ep", "epfix-hollow"
	kcm, err := cluster.StartControllerManager(ctx, harness.ControllerOptions{Controllers: append(slices.Clone(harness.KubeletControllers), "endpointslice")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kcm.Stop)
	if err := cluster.BindNodeProxier(ctx, node); err != nil {
		t.Fatal(err)
	}
	bindNodes(t, "e2e-proxy-reader", rbacv1.PolicyRule{APIGroups: []string{"", "discovery.k8s.io"}, Resources: []string{"services", "endpointslices"}, Verbs: []string{"get", "list", "watch"}})
	cert, key, err := cluster.NodeCredentials(node)
	if err != nil {
		t.Fatal(err)
	}
	relay, err := harness.NewRelay(strings.TrimPrefix(cluster.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	hub := startHubIn(t, t.TempDir(), relay.URL(), "--node-name="+node, "--client-cert="+cert, "--client-key="+key, "--heartbeat-timeout-seconds=1")
	admin := cluster.Admin
	if err := cluster.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if err := harness.CreateWorkloadSources(ctx, admin, ns); err != nil {
		t.Fatal(err)
	}
	names := []string{"app-0", "app-1", "app-2"}
	for _, n := range names {
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, harness.WorkloadPod(ns, n, node), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "edge-workload"}, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hn, err := cluster.StartHollowNode(ctx, harness.HollowOptions{Name: node, Dir: t.TempDir(), Server: hub.ProxyURL})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		hn.Stop()
		if t.Failed() {
			t.Logf("kubemark kubelet log (tail):\n%s", tailString(withoutNoise(hn.Kubelet.Log()), 6000))
		}
		zero := int64(0)
		_ = admin.CoreV1().Pods(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		_ = admin.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{})
	}()
	services := []string{"app"}
	// Online: the kubelet runs the pods; the controller's slice has them ready.
	var ready []want
	eventually(t, 2*time.Minute, "online: the pods ready in the controller's slice", func() error {
		ready = nil
		for _, n := range names {
			p, err := admin.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.PodIP == "" {
				return fmt.Errorf("%s: no IP yet", n)
			}
			ready = append(ready, want{n, p.Status.PodIP, true, true})
		}
		return listed(ctx, admin, ns, services, ready...)
	})
	reader := watchSlices(t, ctx, "kube-proxy", hub.Client(kubeProxyUA, false), ns)
	eventually(t, 30*time.Second, "online: the reader has the slice", func() error { return watched([]*sliceWatcher{reader}, services, ready...) })

	// The kubelet goes silent; the cloud marks its pods not ready, elsewhere.
	hn.StopKubelet()
	var cloudSays []want
	for i, n := range names {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ip := fmt.Sprintf("10.99.0.%d", i+1)
		p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		for j := range p.Status.Conditions {
			if p.Status.Conditions[j].Type == corev1.PodReady {
				p.Status.Conditions[j].Status = corev1.ConditionFalse
			}
		}
		if _, err := admin.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		cloudSays = append(cloudSays, want{n, ip, false, false})
	}
	eventually(t, 30*time.Second, "the reader has the cloud's not-ready slice", func() error { return watched([]*sliceWatcher{reader}, services, cloudSays...) })

	// The link goes black; the node's kubelet restarts (its fake runtime starts every container
	// again) and reports its pods through the hub.
	blackHole(t, hub, relay)
	if err := hn.Kubelet.Start(); err != nil {
		t.Fatal(err)
	}
	if err := hn.WaitKubelet(ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	kubelet := hub.Client(kubeletUA, true)
	eventually(t, 2*time.Minute, "offline: the readers follow the restarted kubelet's reports", func() error {
		var reported []want
		for _, n := range names {
			p, err := kubelet.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return err
			}
			r := false
			for _, c := range p.Status.Conditions {
				r = r || c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
			}
			if !r || p.Status.PodIP == "" || strings.HasPrefix(p.Status.PodIP, "10.99.") {
				return fmt.Errorf("kubelet has not reported %s ready at its address yet (ready %v, %q)", n, r, p.Status.PodIP)
			}
			reported = append(reported, want{n, p.Status.PodIP, true, true})
		}
		if err := watched([]*sliceWatcher{reader}, services, reported...); err != nil {
			return err
		}
		return listed(ctx, hub.Client(kubeProxyUA, true), ns, services, reported...)
	})
	if err := listed(ctx, admin, ns, services, cloudSays...); err != nil {
		t.Fatalf("the cloud was to keep its word meanwhile: %v", err)
	}
}
