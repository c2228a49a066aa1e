package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"nodehub/cache"
	"nodehub/e2e/harness"
	"nodehub/wire"
)

const (
	protobuf    = "application/vnd.kubernetes.protobuf"
	jsonMedia   = "application/json"
	kubeProxyUA = "kube-proxy/v1.34.4 (linux/arm64) kubernetes/e2e"
)

// cloudBytes is what a GET of path returns to admin in the given media type, without the
// trailing newline the JSON encoder adds.
func cloudBytes(t *testing.T, path, media string) ([]byte, error) {
	t.Helper()
	b, err := cluster.Admin.CoreV1().RESTClient().Get().AbsPath(path).SetHeader("Accept", media).DoRaw(context.Background())
	return bytes.TrimSuffix(b, []byte("\n")), err
}

// cachedOwner reports whether a cache (another process's) holds anything of an owner.
func cachedOwner(t *testing.T, dir, owner string) bool {
	t.Helper()
	v, err := cache.OpenView(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for _, o := range v.Owners() {
		if o == owner {
			return true
		}
	}
	return false
}

// cachedBody reads one cache file (nil when absent or invalid).
func cachedBody(h *harness.Hub, rel string) []byte {
	_, body, err := cache.ReadFile(filepath.Join(h.CacheDir, rel))
	if err != nil {
		return nil
	}
	return body
}

// sameAsCloud waits until the cache file of each object equals the cloud's bytes, or, for an
// object the cloud no longer has, until its file is gone.
func sameAsCloud(t *testing.T, h *harness.Hub, what string, objects map[string]string, media string) {
	t.Helper()
	eventually(t, 60*time.Second, what+" cached byte for byte", func() error {
		for rel, path := range objects {
			want, err := cloudBytes(t, path, media)
			got := cachedBody(h, rel)
			switch {
			case apierrors.IsNotFound(err):
				if _, _, serr := cache.ReadFile(filepath.Join(h.CacheDir, rel)); serr == nil {
					return fmt.Errorf("%s deleted in the cloud but still cached", rel)
				}
			case err != nil:
				return err
			case !bytes.Equal(got, want):
				return fmt.Errorf("%s differs from the cloud's (%d vs %d bytes):\n%.400q\n%.400q", rel, len(got), len(want), got, want)
			}
		}
		return nil
	})
}

func TestCacheHoldsWhatKubeletAndKubeProxyReadByteForByte(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns := "cachebytes"
	if err := cluster.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	// Let the node read services and endpointslices as kube-proxy does (kube-proxy-like client
	// uses the node identity here).
	bindNodes(t, "e2e-proxy-reader", rbacv1.PolicyRule{APIGroups: []string{"", "discovery.k8s.io"}, Resources: []string{"services", "endpointslices"}, Verbs: []string{"get", "list", "watch"}})
	for i := 0; i < 3; i++ {
		if _, err := cluster.Admin.CoreV1().Pods(ns).Create(ctx, newPod(ns, fmt.Sprintf("p%d", i)), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		deleteAtEnd(t, ns, fmt.Sprintf("p%d", i))
	}
	deleteAtEnd(t, ns, "p-new") // made later, while the watches are open
	svc, slice := makeService(t, ctx, ns, "web")

	// Without pool sharing: services and slices are then proxied and cached per component (with
	// it, the shared store's copy is cached as the hub's own).
	h := startHub(t, "--cache-sync-interval=100ms", "--pool-scope-resources=")
	kubelet := h.Client(kubeletUA, true)
	proxy := h.Client(kubeProxyUA, false)

	pods, err := kubelet.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + harness.NodeName})
	if err != nil {
		t.Fatal(err)
	}
	pw, err := kubelet.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + harness.NodeName, ResourceVersion: pods.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Stop()
	svcs, err := proxy.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := proxy.CoreV1().Services("").Watch(ctx, metav1.ListOptions{ResourceVersion: svcs.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Stop()
	eps, err := proxy.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ew, err := proxy.DiscoveryV1().EndpointSlices("").Watch(ctx, metav1.ListOptions{ResourceVersion: eps.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer ew.Stop()
	go drain(pw, time.Hour)
	go drain(sw, time.Hour)
	go drain(ew, time.Hour)

	// Admin changes things while the watches are open.
	if _, err := cluster.Admin.CoreV1().Pods(ns).Create(ctx, newPod(ns, "p-new"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p1, _ := cluster.Admin.CoreV1().Pods(ns).Get(ctx, "p1", metav1.GetOptions{})
	p1.Labels["changed"] = "yes"
	if _, err := cluster.Admin.CoreV1().Pods(ns).Update(ctx, p1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Admin.CoreV1().Pods(ns).Delete(ctx, "p2", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	svc.Labels = map[string]string{"changed": "yes"}
	if _, err := cluster.Admin.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice.Endpoints[0].Addresses = []string{"10.1.2.99"}
	if _, err := cluster.Admin.DiscoveryV1().EndpointSlices(ns).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	podFiles := map[string]string{}
	for _, n := range []string{"p0", "p1", "p2", "p-new"} {
		podFiles["kubelet/pods.v1.core/"+ns+"/"+n] = "/api/v1/namespaces/" + ns + "/pods/" + n
	}
	sameAsCloud(t, h, "kubelet's pods (protobuf)", podFiles, protobuf)
	sameAsCloud(t, h, "kube-proxy's service and slice (JSON)", map[string]string{
		"kube-proxy/services.v1.core/" + ns + "/web":                       "/api/v1/namespaces/" + ns + "/services/web",
		"kube-proxy/services.v1.core/default/kubernetes":                   "/api/v1/namespaces/default/services/kubernetes",
		"kube-proxy/endpointslices.v1.discovery.k8s.io/" + ns + "/web-abc": "/apis/discovery.k8s.io/v1/namespaces/" + ns + "/endpointslices/web-abc",
	}, jsonMedia)
	if _, _, err := cache.ReadFile(filepath.Join(h.CacheDir, "kubelet/pods.v1.core", ns, "p0")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(h.CacheDir, ".logs/pods.v1.core.log")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("cache files must be 0600: %v %v", fi.Mode(), err)
	}
}

// bindNodes grants the system:nodes group one rule, cluster-wide.
func bindNodes(t *testing.T, name string, rule rbacv1.PolicyRule) {
	t.Helper()
	if err := cluster.BindNodes(context.Background(), name, rule); err != nil {
		t.Fatal(err)
	}
}

func makeService(t *testing.T, ctx context.Context, ns, name string) (*corev1.Service, *discoveryv1.EndpointSlice) {
	t.Helper()
	return makeServiceOn(t, ctx, cluster, ns, name)
}

// makeServiceOn is makeService in cluster.
func makeServiceOn(t *testing.T, ctx context.Context, cluster *harness.Cluster, ns, name string) (*corev1.Service, *discoveryv1.EndpointSlice) {
	t.Helper()
	svc, err := cluster.Admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt(8080)}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	port, proto := int32(8080), corev1.ProtocolTCP
	slice, err := cluster.Admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-abc", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.1.2.3"}, NodeName: ptr(harness.NodeName)}},
		Ports:       []discoveryv1.EndpointPort{{Port: &port, Protocol: &proto}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return svc, slice
}

func ptr[T any](v T) *T { return &v }

func TestCacheCustomResourceForConfiguredAgent(t *testing.T) {
	ctx := context.Background()
	crd := `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"widgets.e2e.nodehub.io"},
"spec":{"group":"e2e.nodehub.io","scope":"Namespaced","names":{"plural":"widgets","singular":"widget","kind":"Widget","listKind":"WidgetList"},
"versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}`
	err := cluster.Admin.RESTClient().Post().AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions").SetHeader("Content-Type", jsonMedia).Body([]byte(crd)).Do(ctx).Error()
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	bindNodes(t, "e2e-widget-reader", rbacv1.PolicyRule{APIGroups: []string{"e2e.nodehub.io"}, Resources: []string{"widgets"}, Verbs: []string{"get", "list", "watch"}})
	cr := `{"apiVersion":"e2e.nodehub.io/v1","kind":"Widget","metadata":{"name":"w1","namespace":"default","labels":{"color":"blue"}},"spec":{"size":3}}`
	eventually(t, 20*time.Second, "custom resource served", func() error {
		err := cluster.Admin.RESTClient().Post().AbsPath("/apis/e2e.nodehub.io/v1/namespaces/default/widgets").SetHeader("Content-Type", jsonMedia).Body([]byte(cr)).Do(ctx).Error()
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})

	h := startHub(t, "--cache-agents=kubelet,widget-agent")
	agent := kubernetes.NewForConfigOrDie(h.Config("widget-agent/1.0", false))
	if _, err := agent.RESTClient().Get().AbsPath("/apis/e2e.nodehub.io/v1/widgets").DoRaw(ctx); err != nil {
		t.Fatal(err)
	}
	other := kubernetes.NewForConfigOrDie(h.Config("not-an-agent/1.0", false))
	if _, err := other.RESTClient().Get().AbsPath("/apis/e2e.nodehub.io/v1/widgets").DoRaw(ctx); err != nil {
		t.Fatal(err)
	}
	sameAsCloud(t, h, "the custom resource", map[string]string{
		"widget-agent/widgets.v1.e2e.nodehub.io/default/w1": "/apis/e2e.nodehub.io/v1/namespaces/default/widgets/w1",
	}, jsonMedia)
	if cachedOwner(t, h.CacheDir, "not-an-agent") {
		t.Fatal("a component outside --cache-agents was cached")
	}
}

func TestTwoListsWithDifferentSelectorsReadBackExactly(t *testing.T) {
	ctx := context.Background()
	ns := "twolists"
	if err := cluster.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6; i++ {
		p := newPod(ns, fmt.Sprintf("t%d", i))
		p.Labels = map[string]string{"tier": []string{"web", "db"}[i%2], "n": fmt.Sprint(i)}
		if _, err := cluster.Admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		deleteAtEnd(t, ns, p.Name)
	}
	h := startHub(t)
	cl := h.Client(kubeletUA, true)
	selectors := []metav1.ListOptions{
		{LabelSelector: "tier=web", FieldSelector: "spec.nodeName=" + harness.NodeName},
		{LabelSelector: "tier=db,n!=1", FieldSelector: "spec.nodeName=" + harness.NodeName},
	}
	var want [][]string
	for _, o := range selectors {
		l, err := cl.CoreV1().Pods(ns).List(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range l.Items {
			names = append(names, p.Name)
		}
		sort.Strings(names)
		want = append(want, names)
	}
	// Stop the hub (it holds the cache's lock and flushes on the way out), then read the cache.
	h.Stop()
	store, err := cache.Open(h.CacheDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for i, o := range selectors {
		sel, err := wire.NewSelector(ns, o.LabelSelector, o.FieldSelector)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		res, err := store.EachInList(cache.Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}, sel, func(it cache.Item) error {
			got = append(got, it.Header.Name)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(got, ",") != strings.Join(want[i], ",") || res.Record == nil || !res.Record.Complete {
			t.Fatalf("list %q/%q reads back %v (record %+v), the cloud said %v", o.LabelSelector, o.FieldSelector, got, res.Record, want[i])
		}
	}
}

func TestFullDiskKeepsProxyingAndIsReported(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tiny tmpfs")
	}
	dir := t.TempDir()
	mnt := filepath.Join(dir, "cache")
	os.MkdirAll(mnt, 0o700)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v %s", err, out)
	}
	defer exec.Command("umount", "-l", mnt).Run()
	ctx := context.Background()
	ns := "fulldisk"
	if err := cluster.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		p := newPod(ns, fmt.Sprintf("big-%02d", i))
		// Random, so the cache's compression cannot make 40 of them fit in 64 KiB (4000 x's did, and
		// the disk filled only with what earlier tests had left on the node).
		pad := make([]byte, 4500)
		rand.Read(pad)
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "PAD", Value: base64.StdEncoding.EncodeToString(pad)}}
		if _, err := cluster.Admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		deleteAtEnd(t, ns, p.Name)
	}
	h := startHub(t, "--disk-cache-path="+mnt)
	cl := h.Client(kubeletUA, true)
	for i := 0; i < 3; i++ {
		l, err := cl.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + harness.NodeName})
		if err != nil || len(l.Items) < 40 {
			t.Fatalf("list through the hub with a full disk: %v", err)
		}
	}
	eventually(t, 60*time.Second, "ENOSPC counted in /metrics", func() error {
		v, err := h.Metric(`nodehub_cache_errors_total{resource="pods"}`)
		if err != nil || v < 1 {
			return fmt.Errorf("nodehub_cache_errors_total{resource=pods} = %v %v", v, err)
		}
		return nil
	})
	if v, _, _ := h.Get("/v1/healthz"); v != 200 {
		t.Fatal("hub unhealthy after a full disk")
	}
}
