package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	nhcache "nodehub/cache"
	"nodehub/e2e/harness"
)

const corednsUA = "coredns/v1.11.3 (linux/arm64) kubernetes/e2e"

// poolClient is a kube-proxy- or coredns-like client: informers on services and endpointslices
// of one namespace, remembering each object's resourceVersion and any that went backwards.
type poolClient struct {
	name string
	mu   sync.Mutex
	seen map[string]string // kind/name → resourceVersion
	back []string          // events that went back in resourceVersion (a duplicated or reordered event)
	adds int
}

// kubeProxySelector is what kube-proxy lists services and slices with.
const kubeProxySelector = "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name"

func startPoolClient(t *testing.T, ctx context.Context, name string, cs kubernetes.Interface, ns string) *poolClient {
	t.Helper()
	c := &poolClient{name: name, seen: map[string]string{}}
	opts := []informers.SharedInformerOption{informers.WithNamespace(ns)}
	if strings.Contains(name, "kube-proxy") {
		opts = append(opts, informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = kubeProxySelector }))
	}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, opts...)
	for kind, inf := range map[string]cache.SharedIndexInformer{"svc": f.Core().V1().Services().Informer(), "slice": f.Discovery().V1().EndpointSlices().Informer()} {
		_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.set(kind, obj, true) },
			UpdateFunc: func(_, obj any) { c.set(kind, obj, false) },
			DeleteFunc: func(obj any) {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				m, _ := obj.(metav1.Object)
				c.mu.Lock()
				delete(c.seen, kind+"/"+m.GetName())
				c.mu.Unlock()
			},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("%s: %v not synced", name, typ)
		}
	}
	return c
}

func (c *poolClient) set(kind string, obj any, add bool) {
	m := obj.(metav1.Object)
	k := kind + "/" + m.GetName()
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.seen[k]; ok && rvLess(m.GetResourceVersion(), old) {
		c.back = append(c.back, fmt.Sprintf("%s %s after %s", k, m.GetResourceVersion(), old))
	}
	c.seen[k] = m.GetResourceVersion()
	if add {
		c.adds++
	}
}

func rvLess(a, b string) bool { return len(a) < len(b) || len(a) == len(b) && a < b }

// state is what the client holds, as sorted "kind/name@rv" lines.
func (c *poolClient) state() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return flatten(c.seen)
}

func flatten(m map[string]string) string {
	var out []string
	for k, v := range m {
		out = append(out, k+"@"+v)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// truth is the apiserver's own list of the namespace's services and slices.
func truth(ctx context.Context, ns string) (string, error) { return truthFrom(ctx, cluster.Admin, ns) }

// truthFrom is truth as the apiserver cs talks to lists it.
func truthFrom(ctx context.Context, cs kubernetes.Interface, ns string) (string, error) {
	m := map[string]string{}
	svcs, err := cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	for _, s := range svcs.Items {
		m["svc/"+s.Name] = s.ResourceVersion
	}
	sl, err := cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	for _, s := range sl.Items {
		m["slice/"+s.Name] = s.ResourceVersion
	}
	return flatten(m), nil
}

// converge waits until every client holds exactly what the apiserver has, and none saw an
// event go backwards.
func converge(t *testing.T, ctx context.Context, ns string, clients []*poolClient) {
	t.Helper()
	convergeWith(t, ctx, cluster.Admin, ns, clients)
}

// convergeWith is converge with the truth listed through cs.
func convergeWith(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string, clients []*poolClient) {
	t.Helper()
	eventually(t, 60*time.Second, "clients match the apiserver", func() error {
		want, err := truthFrom(ctx, cs, ns)
		if err != nil {
			return err
		}
		for _, c := range clients {
			if got := c.state(); got != want {
				return fmt.Errorf("%s holds %d bytes of state, apiserver %d:\n got %.300s\nwant %.300s", c.name, len(got), len(want), got, want)
			}
		}
		return nil
	})
	for _, c := range clients {
		c.mu.Lock()
		back := c.back
		c.mu.Unlock()
		if len(back) > 0 {
			t.Errorf("%s saw events go backwards: %v", c.name, back)
		}
	}
}

// poolFixture makes n services with one slice each in a fresh namespace and grants the node
// group what pool sharing needs.
func poolFixture(t *testing.T, ctx context.Context, ns string, n int) []string {
	t.Helper()
	bindNodes(t, "e2e-proxy-reader", rbacv1.PolicyRule{APIGroups: []string{"", "discovery.k8s.io"}, Resources: []string{"services", "endpointslices"}, Verbs: []string{"get", "list", "watch"}})
	if err := cluster.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	var slices []string
	for i := 0; i < n; i++ {
		_, sl := makeService(t, ctx, ns, fmt.Sprintf("s%02d", i))
		slices = append(slices, sl.Name)
	}
	return slices
}

// churn updates perSecond EndpointSlices per second, round robin, for d; it returns the updates made.
func churn(t *testing.T, ctx context.Context, ns string, slices []string, perSecond int, d time.Duration) int {
	t.Helper()
	tick := time.NewTicker(time.Second / time.Duration(perSecond))
	defer tick.Stop()
	end := time.Now().Add(d)
	n, failed := 0, 0
	for time.Now().Before(end) {
		<-tick.C
		name := slices[n%len(slices)]
		patch := fmt.Sprintf(`{"endpoints":[{"addresses":["10.1.%d.%d"],"nodeName":%q}]}`, n/250%250, n%250+1, harness.NodeName)
		if _, err := cluster.Admin.DiscoveryV1().EndpointSlices(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			// A loaded machine may time a write out; the clients must still match the apiserver.
			if failed++; failed > perSecond {
				t.Fatalf("churn: %d updates failed, the last: %v", failed, err)
			}
			t.Logf("churn: update failed (the test goes on): %v", err)
		}
		n++
	}
	return n
}

// Node level: a kube-proxy-like and a coredns-like client (protobuf and JSON) are served from the
// hub's shared store, which alone lists and watches the cloud; they see every change.
func TestPoolNodeSharingServesLocalClients(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := "pool-node"
	slices := poolFixture(t, ctx, ns, 10)
	h := startHub(t)
	eventually(t, 20*time.Second, "shared stores synced", func() error {
		v, err := h.Metric(`nodehub_pool_received_bytes_total{source="cloud",resource="endpointslices"}`)
		if err == nil && v <= 0 {
			err = fmt.Errorf("no bytes yet")
		}
		return err
	})
	var clients []*poolClient
	for i := 0; i < 2; i++ {
		clients = append(clients, startPoolClient(t, ctx, fmt.Sprintf("kube-proxy-%d", i), h.Client(kubeProxyUA, true), ns))
		clients = append(clients, startPoolClient(t, ctx, fmt.Sprintf("coredns-%d", i), kubernetes.NewForConfigOrDie(h.Config(corednsUA, false)), ns))
	}
	before, _ := h.Metric(`nodehub_cloud_received_bytes_total{component="kube-proxy",resource="endpointslices"}`)
	n := churn(t, ctx, ns, slices, 10, 5*time.Second)
	// A service deleted and another created: ADDED and DELETED flow too.
	if err := cluster.Admin.CoreV1().Services(ns).Delete(ctx, "s00", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "late"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 81}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Admin.DiscoveryV1().EndpointSlices(ns).Delete(ctx, slices[0], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	converge(t, ctx, ns, clients)
	after, _ := h.Metric(`nodehub_cloud_received_bytes_total{component="kube-proxy",resource="endpointslices"}`)
	if after != before {
		t.Errorf("kube-proxy's endpointslices came from the cloud (%v → %v bytes), not the shared store", before, after)
	}
	if w, _ := h.Metric("nodehub_pool_watches"); w < 8 {
		t.Errorf("nodehub_pool_watches = %v, want ≥ 8 (4 clients × 2 resources)", w)
	}
	t.Logf("%d slice updates; every client converged; shared store %v", n, metricOr(h, "nodehub_pool_store_bytes"))
	var _ = discoveryv1.LabelServiceName
}

func metricOr(h *harness.Hub, series string) float64 {
	v, _ := h.Metric(series)
	return v
}

// What the shared store receives is cached (as the hub's own), so a hub restarted while the
// cloud is unreachable still answers the pool-scope lists.
func TestPoolStoreCachedForAnOfflineRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := "pool-offline"
	poolFixture(t, ctx, ns, 3)
	relay, err := harness.NewRelay(strings.TrimPrefix(cluster.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	dir := t.TempDir()
	h := startHubIn(t, dir, relay.URL(), "--heartbeat-timeout-seconds=1")
	eventually(t, 20*time.Second, "the shared store's copy cached", func() error {
		for _, f := range []string{"nodehub/endpointslices.v1.discovery.k8s.io/" + ns + "/s02-abc", "nodehub/services.v1.core/" + ns + "/s02"} {
			if _, _, err := nhcache.ReadFile(filepath.Join(h.CacheDir, f)); err != nil {
				return err
			}
		}
		return nil
	})
	h.Stop()
	relay.Refuse()
	h2 := startHubIn(t, dir, relay.URL(), "--heartbeat-timeout-seconds=1")
	sl, err := h2.Client(kubeProxyUA, true).DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(sl.Items) != 3 {
		t.Fatalf("offline after a restart: %v slices, %v", sl, err)
	}
	svcs, err := kubernetes.NewForConfigOrDie(h2.Config(corednsUA, false)).CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(svcs.Items) != 3 {
		t.Fatalf("offline after a restart: %v services, %v", svcs, err)
	}
}
