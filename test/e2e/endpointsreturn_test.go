package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"

	"nodehub/e2e/harness"
)

// Issue 30: a pod that turns ready after the return must come back into its Service on its own
// node. Offline, kubelet reports web-0 at a new IP ready and web-1 not ready; the link returns,
// kubelet's status write of web-0 reaches the cloud and its EndpointSlice controller catches up
// (web-1 still corrected: the cloud names its dead address); then kubelet reports web-1 ready
// through the hub, its first write since the return. kube-proxy-like readers (client-go
// informers: watch-list, then watch; JSON and protobuf) and fresh lists must show web-1 ready soon
// after the cloud's slice does — not only once the corrections' 2-minute bound ran out, and not
// never. (The controller's slice may reach the hub before the cloud's answer to the status write:
// hub/endpointfix's sending.go.)
func TestEndpointsPodReadyAfterReturn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns := "epreturn"
	if err := cluster.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	cleanupPods(t, ns)
	bindNodes(t, "e2e-proxy-reader", rbacv1.PolicyRule{APIGroups: []string{"", "discovery.k8s.io"}, Resources: []string{"services", "endpointslices"}, Verbs: []string{"get", "list", "watch"}})
	kcm, err := cluster.StartControllerManager(ctx, harness.ControllerOptions{Controllers: append(slices.Clone(harness.DefaultControllers), "endpointslice")})
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
	if _, err := cluster.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: harness.NodeName}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	uids := map[string]types.UID{}
	for i, name := range []string{"web-0", "web-1"} {
		p := newPod(ns, name)
		p.Labels = map[string]string{"app": "web"}
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080}}
		uids[name] = createReadyPod(t, ctx, p, fmt.Sprintf("10.244.3.%d", i)).UID
	}
	services := []string{"web"}
	if _, err := cluster.Admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt(8080)}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := []want{{"web-0", "10.244.3.0", true, true}, {"web-1", "10.244.3.1", true, true}}
	eventually(t, 60*time.Second, "the EndpointSlice controller's slice", func() error {
		return listed(ctx, cluster.Admin, ns, services, before...)
	})

	relay, err := harness.NewRelay(strings.TrimPrefix(cluster.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	h := startHubServers(t, relay.URL(), "--heartbeat-timeout-seconds=1")
	waitServing(t, h)
	kubelet := h.Client(kubeletUA, true)
	readers := map[string]kubernetes.Interface{"kube-proxy json": h.Client(kubeProxyUA, false), "kube-proxy protobuf": h.Client(kubeProxyUA, true)}
	ws := []*sliceWatcher{watchProxySlices(t, ctx, "kube-proxy json", readers["kube-proxy json"], ns),
		watchProxySlices(t, ctx, "kube-proxy protobuf", readers["kube-proxy protobuf"], ns)}
	if _, err := kubelet.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + harness.NodeName}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "online: the readers have the cloud's slice", func() error {
		return readersHave(ctx, ws, readers, ns, services, before...)
	})

	// Offline: web-0 back at a new IP, ready; web-1 at a new IP, not ready yet.
	blackHole(t, h, relay)
	report := func(name, ip string, ready bool) error {
		return kubeletPodStatus(ctx, kubelet, ns, name, uids[name], ip, ready)
	}
	for _, r := range []want{{"web-0", "10.244.3.10", true, true}, {"web-1", "10.244.3.11", false, false}} {
		if err := report(r.pod, r.addr, r.ready); err != nil {
			t.Fatalf("kubelet's offline status write of %s: %v", r.pod, err)
		}
	}
	offline := []want{{"web-0", "10.244.3.10", true, true}, {"web-1", "10.244.3.11", false, false}}
	eventually(t, 30*time.Second, "offline: the readers follow kubelet", func() error {
		return readersHave(ctx, ws, readers, ns, services, offline...)
	})

	// The return: kubelet's status writes reach the cloud (it sends them again, through the
	// hub) and the controller catches up.
	if err := relay.Pass(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "hub back online", func() error {
		if v, _ := h.Metric(fmt.Sprintf(`nodehub_server_healthy{server="%s"}`, relay.Addr)); v != 1 {
			return fmt.Errorf("server not healthy yet")
		}
		return nil
	})
	eventually(t, 30*time.Second, "kubelet's status write of web-0 reaches the cloud", func() error {
		for _, r := range offline[:1] {
			if err := report(r.pod, r.addr, r.ready); err != nil {
				return err
			}
		}
		return nil
	})
	eventually(t, 60*time.Second, "the cloud's slice caught up with web-0", func() error {
		return listed(ctx, cluster.Admin, ns, services, offline[0], want{"web-1", "10.244.3.1", true, true})
	})
	eventually(t, 30*time.Second, "the readers have web-0 from the cloud, web-1 still corrected", func() error {
		return readersHave(ctx, ws, readers, ns, services, offline...)
	})
	if v, _ := h.Metric("nodehub_endpoints_corrected"); v < 1 {
		t.Fatalf("web-1 no longer corrected before kubelet's report (nodehub_endpoints_corrected %v)", v)
	}

	// web-1 turns ready, as kubelet reports through the hub.
	if err := report("web-1", "10.244.3.11", true); err != nil {
		t.Fatalf("kubelet's status write of web-1 ready: %v", err)
	}
	ready := []want{{"web-0", "10.244.3.10", true, true}, {"web-1", "10.244.3.11", true, true}}
	eventually(t, 60*time.Second, "the cloud's slice has web-1 ready", func() error {
		return listed(ctx, cluster.Admin, ns, services, ready...)
	})
	cloudAt := time.Now()
	// Generous for a loaded machine, yet well short of the corrections' 2-minute bound.
	eventually(t, 60*time.Second, "the readers' open watches and fresh lists have web-1 ready", func() error {
		return readersHave(ctx, ws, readers, ns, services, ready...)
	})
	t.Logf("web-1 ready in every reader %v after the cloud's slice said so", time.Since(cloudAt).Round(10*time.Millisecond))
}

// watchProxySlices is a sliceWatcher that reads as kube-proxy does: every namespace's slices, with
// kube-proxy's label selector; it keeps those of namespace ns.
func watchProxySlices(t *testing.T, ctx context.Context, name string, cs kubernetes.Interface, ns string) *sliceWatcher {
	t.Helper()
	w := &sliceWatcher{name: name, now: map[string]*discoveryv1.EndpointSlice{}, seen: map[string]bool{}}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name"
	}))
	inf := f.Discovery().V1().EndpointSlices().Informer()
	put := func(obj any) {
		if s, ok := obj.(*discoveryv1.EndpointSlice); ok && s.Namespace == ns {
			w.mu.Lock()
			w.now[s.Name] = s
			w.mu.Unlock()
		}
	}
	_, _ = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    put,
		UpdateFunc: func(_, o any) { put(o) },
		DeleteFunc: func(o any) {
			if s, ok := o.(*discoveryv1.EndpointSlice); ok && s.Namespace == ns {
				w.mu.Lock()
				delete(w.now, s.Name)
				w.mu.Unlock()
			}
		},
	})
	f.Start(ctx.Done())
	return w
}
