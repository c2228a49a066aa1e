package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"

	"nodehub/cache"
	"nodehub/e2e/harness"
	"nodehub/wire"
)

func TestFiltersRewriteForTheEdge(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bindNodes(t, "e2e-proxy-reader", rbacv1.PolicyRule{APIGroups: []string{"", "discovery.k8s.io"}, Resources: []string{"services", "endpointslices"}, Verbs: []string{"get", "list", "watch"}})
	ns := "filters"
	if err := cluster.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	lb := func(name string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"svc.openyurt.io/discard": "true"}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt(80)}}}}
	}
	if _, err := cluster.Admin.CoreV1().Services(ns).Create(ctx, lb("lb-discard"), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	relay, err := harness.NewRelay(strings.TrimPrefix(cluster.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Refuse()
	h := startHubServers(t, relay.URL(), "--master-service-host=169.254.2.1", "--proxy-secure-port=10268")
	kubelet := h.Client(kubeletUA, true)
	proxy := h.Client(kubeProxyUA, false)

	// masterservice: kubelet sees default/kubernetes at the hub, in get and list.
	svc, err := kubelet.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != "169.254.2.1" || svc.Spec.Ports[0].Port != 10268 {
		t.Fatalf("kubelet's kubernetes service: %s %+v", svc.Spec.ClusterIP, svc.Spec.Ports)
	}
	list, err := kubelet.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range list.Items {
		if s.Namespace == "default" && s.Name == "kubernetes" {
			found = s.Spec.ClusterIP == "169.254.2.1"
		}
	}
	if !found {
		t.Fatal("kubelet's service list has the cloud's kubernetes address")
	}
	if direct, _ := cluster.Admin.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{}); direct.Spec.ClusterIP == "169.254.2.1" {
		t.Fatal("the cloud's object changed")
	}
	// kube-proxy is not kubelet: it sees the real service, but not the discarded LoadBalancer.
	psvcs, err := proxy.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range psvcs.Items {
		if s.Name == "lb-discard" {
			t.Fatal("discardcloudservice did not drop the LoadBalancer service")
		}
		if s.Namespace == "default" && s.Name == "kubernetes" && s.Spec.ClusterIP == "169.254.2.1" {
			t.Fatal("masterservice applied to kube-proxy")
		}
	}
	// forwardkubesvctraffic: kube-proxy's default/kubernetes slice points at the hub. (No
	// controller-manager runs here: make the slice it would mirror from the Endpoints.)
	port, proto, name := int32(cluster.APIServers[0].Port), corev1.ProtocolTCP, "https"
	_, err = cluster.Admin.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "kubernetes", Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
		AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.10"}}},
		Ports: []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "default/kubernetes endpointslice rewritten", func() error {
		slices, err := proxy.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=kubernetes"})
		if err != nil {
			return err
		}
		if len(slices.Items) == 0 || len(slices.Items[0].Endpoints) == 0 || slices.Items[0].Endpoints[0].Addresses[0] != "169.254.2.1" {
			return errorf("slices %+v", slices.Items)
		}
		return nil
	})

	// In a watch, a service the filter drops reaches kube-proxy as DELETED, never as ADDED.
	w, err := proxy.CoreV1().Services(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: psvcs.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := cluster.Admin.CoreV1().Services(ns).Create(ctx, lb("lb-two"), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		s, _ := ev.Object.(*corev1.Service)
		if ev.Type != watch.Deleted || s == nil || s.Name != "lb-two" {
			t.Fatalf("watch event %s %v", ev.Type, s)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no event for the discarded service")
	}

	// The cache holds what the client received, and the offline proxy answers it.
	eventually(t, 60*time.Second, "filtered object cached", func() error {
		_, body, err := cache.ReadFile(filepath.Join(h.CacheDir, "kubelet/services.v1.core/default/kubernetes"))
		if err != nil {
			return err
		}
		obj, err := wire.Decode(body)
		if err != nil {
			return err
		}
		if ip := obj.(*corev1.Service).Spec.ClusterIP; ip != "169.254.2.1" {
			return errorf("cached ClusterIP %s", ip)
		}
		return nil
	})
	relay.Refuse()
	eventually(t, 60*time.Second, "offline answer filtered", func() error {
		svc, err := kubelet.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if svc.Spec.ClusterIP != "169.254.2.1" {
			return errorf("offline ClusterIP %s", svc.Spec.ClusterIP)
		}
		if v, _ := h.Metric(`nodehub_offline_requests_total{verb="get"}`); v < 1 {
			return errorf("not answered offline yet")
		}
		return nil
	})
}
