package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"nodehub/e2e/harness"
)

// topologySetup makes three nodes (two in pool-a), and three services
// with an endpoint on each node (in namespace ns): by-host (kubernetes.io/hostname), by-pool (openyurt.io/nodepool)
// and plain (no topology key).
func topologySetup(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	bindNodes(t, "e2e-proxy-reader", rbacv1.PolicyRule{APIGroups: []string{"", "discovery.k8s.io"}, Resources: []string{"services", "endpointslices"}, Verbs: []string{"get", "list", "watch"}})
	// Nodes of the pool are labelled (no NodePool API here: the hub falls back to the label, which
	// needs nodes list/watch for the node group — what OpenYurt grants for nodepools).
	bindNodes(t, "e2e-node-lister", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list", "watch"}})
	for _, n := range []string{harness.NodeName, "edge-2", "cloud-1"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}
		if _, err := cluster.Admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		if n != "cloud-1" {
			patch := []byte(`{"metadata":{"labels":{"apps.openyurt.io/nodepool":"pool-a"}}}`)
			if _, err := cluster.Admin.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cluster.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	mk := func(name, key string) {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt(80)}}}}
		if key != "" {
			svc.Annotations = map[string]string{"openyurt.io/topologyKeys": key}
		}
		if _, err := cluster.Admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4}
		for i, n := range []string{harness.NodeName, "edge-2", "cloud-1"} {
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.9.0.%d", i+1)}, NodeName: ptr(n)})
		}
		if _, err := cluster.Admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, sl, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	mk("by-host", "kubernetes.io/hostname")
	mk("by-pool", "openyurt.io/nodepool")
	mk("plain", "")

}

func TestServiceTopologyKeepsThisNodesOrPoolsEndpoints(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "topology"
	topologySetup(t, ctx, ns)
	h := startHub(t, "--nodepool-name=pool-a")
	proxy := h.Client(kubeProxyUA, true)
	counts := func() (map[string]int, string, error) {
		l, err := proxy.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, "", err
		}
		out := map[string]int{}
		for _, s := range l.Items {
			out[s.Labels[discoveryv1.LabelServiceName]] = len(s.Endpoints)
		}
		return out, l.ResourceVersion, nil
	}
	var rv string
	eventually(t, 15*time.Second, "endpoints filtered by topology", func() error {
		c, r, err := counts()
		if err != nil {
			return err
		}
		rv = r
		if c["by-host"] != 1 || c["by-pool"] != 2 || c["plain"] != 3 {
			return fmt.Errorf("endpoints per service %v", c)
		}
		return nil
	})

	// Changing the annotation re-filters: the open watch ends, the re-list is right.
	w, err := proxy.DiscoveryV1().EndpointSlices(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	patch := []byte(`{"metadata":{"annotations":{"openyurt.io/topologyKeys":"openyurt.io/nodepool"}}}`)
	if _, err := cluster.Admin.CoreV1().Services(ns).Patch(ctx, "by-host", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	for open := true; open; {
		select {
		case _, open = <-w.ResultChan():
		case <-time.After(10 * time.Second):
			t.Fatal("the filtered watch did not end when the service's topology changed")
		}
	}
	if c, _, err := counts(); err != nil || c["by-host"] != 2 {
		t.Fatalf("after the annotation change: %v %v", c, err)
	}
}

// With OpenYurt's NodePool API installed, the pool's members come from the NodePool's status.
func TestServiceTopologyFromNodePool(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	makeNodePool(t, ctx, "pool-np")
	bindNodes(t, "e2e-proxy-reader", rbacv1.PolicyRule{APIGroups: []string{"", "discovery.k8s.io"}, Resources: []string{"services", "endpointslices"}, Verbs: []string{"get", "list", "watch"}})
	status := `{"status":{"nodes":["` + harness.NodeName + `","cloud-1"]}}`
	if err := cluster.Admin.RESTClient().Patch(types.MergePatchType).AbsPath("/apis/apps.openyurt.io/v1beta2/nodepools/pool-np/status").Body([]byte(status)).Do(ctx).Error(); err != nil {
		t.Fatal(err)
	}
	ns := "topology-np"
	if err := cluster.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "np", Annotations: map[string]string{"openyurt.io/topologyKeys": "openyurt.io/nodepool"}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt(80)}}}}
	if _, err := cluster.Admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "np-x", Labels: map[string]string{discoveryv1.LabelServiceName: "np"}}, AddressType: discoveryv1.AddressTypeIPv4}
	for i, n := range []string{harness.NodeName, "edge-2", "cloud-1"} {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.8.0.%d", i+1)}, NodeName: ptr(n)})
	}
	if _, err := cluster.Admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, sl, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	h := startHub(t, "--nodepool-name=pool-np")
	proxy := h.Client(kubeProxyUA, true)
	eventually(t, 15*time.Second, "pool from the NodePool's status", func() error {
		l, err := proxy.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(l.Items) != 1 || len(l.Items[0].Endpoints) != 2 || *l.Items[0].Endpoints[1].NodeName != "cloud-1" {
			return fmt.Errorf("slices %+v", l.Items)
		}
		return nil
	})
}

// nodePoolAPI installs OpenYurt's NodePool CRD (apps.openyurt.io/v1beta2) and lets the node group
// read NodePools, as installing OpenYurt does.
func nodePoolAPI(t *testing.T, ctx context.Context) {
	t.Helper()
	crd := `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"nodepools.apps.openyurt.io"},
"spec":{"group":"apps.openyurt.io","scope":"Cluster","names":{"plural":"nodepools","singular":"nodepool","kind":"NodePool","listKind":"NodePoolList"},
"versions":[{"name":"v1beta2","served":true,"storage":true,"subresources":{"status":{}},"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}`
	err := cluster.Admin.RESTClient().Post().AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions").SetHeader("Content-Type", jsonMedia).Body([]byte(crd)).Do(ctx).Error()
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	bindNodes(t, "e2e-nodepool-reader", rbacv1.PolicyRule{APIGroups: []string{"apps.openyurt.io"}, Resources: []string{"nodepools"}, Verbs: []string{"get", "list", "watch"}})
	eventually(t, 20*time.Second, "the NodePool API served", func() error {
		return cluster.Admin.RESTClient().Get().AbsPath("/apis/apps.openyurt.io/v1beta2/nodepools").Do(ctx).Error()
	})
}

// makeNodePool makes the NodePool name (installing its API first, nodePoolAPI).
func makeNodePool(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	nodePoolAPI(t, ctx)
	np := `{"apiVersion":"apps.openyurt.io/v1beta2","kind":"NodePool","metadata":{"name":"` + name + `"},"spec":{"type":"Edge"}}`
	eventually(t, 20*time.Second, "NodePool created", func() error {
		err := cluster.Admin.RESTClient().Post().AbsPath("/apis/apps.openyurt.io/v1beta2/nodepools").SetHeader("Content-Type", jsonMedia).Body([]byte(np)).Do(ctx).Error()
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}

// The filters hold from the hub's first answer: a list right after /v1/readyz turns 200 is
// filtered (issue 23: for about a second kube-proxy got every node's endpoints, the topology
// source's first reads having gone to an empty cache and backed off). Three starts, each read at
// once.
func TestServiceTopologyHoldsFromTheFirstAnswer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "topology-first"
	topologySetup(t, ctx, ns)
	for i := 0; i < 3; i++ {
		h := startHub(t, "--nodepool-name=pool-a") // returns once /v1/readyz is 200
		l, err := h.Client(kubeProxyUA, true).DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("start %d: kube-proxy's first list: %v", i, err)
		}
		c := map[string]int{}
		for _, s := range l.Items {
			c[s.Labels[discoveryv1.LabelServiceName]] = len(s.Endpoints)
		}
		if c["by-host"] != 1 || c["by-pool"] != 2 || c["plain"] != 3 {
			t.Fatalf("start %d: kube-proxy's first list right after readiness: endpoints per service %v, want by-host 1, by-pool 2, plain 3", i, c)
		}
		h.Stop()
	}
}
