package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"nodehub/e2e/harness"
)

// blackHole cuts the link (no answer, not a refusal) and waits until the hub knows it is offline.
func blackHole(t *testing.T, h *harness.Hub, relay *harness.Relay) {
	t.Helper()
	if err := relay.BlackHole(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "hub offline", func() error {
		if v, _ := h.Metric(`nodehub_server_healthy{server="` + relay.Addr + `"}`); v != 0 {
			return errorf("server healthy %v", v)
		}
		return nil
	})
}

// saPoolReader creates a ServiceAccount allowed to read services and endpointslices everywhere,
// as kube-proxy's or coredns's is, and returns a token for it.
func saPoolReader(t *testing.T, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	if err := cluster.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-pool-reader"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{"", "discovery.k8s.io"}, Resources: []string{"services", "endpointslices"}}}}
	if _, err := cluster.Admin.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := cluster.Admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-pool-reader-" + ns + "-" + name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: cr.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}}
	if _, err := cluster.Admin.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tr, err := cluster.Admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// informerSynced runs an EndpointSlice informer for cs and reports whether it synced within d.
func informerSynced(cs kubernetes.Interface, d time.Duration) (int, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	f := informers.NewSharedInformerFactory(cs, 0)
	inf := f.Discovery().V1().EndpointSlices().Informer()
	f.Start(ctx.Done())
	ok := cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
	n := len(inf.GetStore().List())
	cancel()
	f.Shutdown()
	return n, ok
}

// A client with its own ServiceAccount token on the secure port (kube-proxy, coredns, or any
// app) lists and watches services and endpointslices offline, and after its own restart offline,
// from what it last received, also after the hub restarted offline.
func TestOfflineServiceAccountPoolScopeReads(t *testing.T) {
	startControllerManager(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cluster.ApproveServingCSRs(ctx)
	ns := "sa-pool"
	token := saPoolReader(t, ns, "reader")
	makeService(t, ctx, ns, "sa-web")
	relay, err := harness.NewRelay(strings.TrimPrefix(cluster.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Refuse()
	dir := t.TempDir()
	h := startHubIn(t, dir, relay.URL(), "--heartbeat-timeout-seconds=1")
	waitServing(t, h)
	clients := map[string]func(*harness.Hub) *kubernetes.Clientset{}
	for _, ua := range []string{"coredns/e2e", "my-app/1.0"} {
		ua := ua
		clients[ua] = func(h *harness.Hub) *kubernetes.Clientset {
			cfg := podConfig(h, token)
			cfg.UserAgent = ua
			return kubernetes.NewForConfigOrDie(cfg)
		}
	}
	for ua, mk := range clients {
		cs := mk(h)
		if l, err := cs.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) == 0 {
			t.Fatalf("%s online slice list: %v", ua, err)
		}
		if _, err := cs.CoreV1().Services("").List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatalf("%s online service list: %v", ua, err)
		}
		if n, ok := informerSynced(cs, 20*time.Second); !ok || n == 0 {
			t.Fatalf("%s online informer: synced %v with %d slices", ua, ok, n)
		}
	}
	time.Sleep(2 * time.Second) // the cache writes within --cache-sync-interval

	check := func(when string, h *harness.Hub) {
		t.Helper()
		for ua, mk := range clients {
			cs := mk(h) // a new client: the pod restarted
			start := time.Now()
			l, err := cs.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
			if err != nil || len(l.Items) == 0 {
				t.Fatalf("%s: %s slice list: %v", when, ua, err)
			}
			if d := time.Since(start); d > time.Second {
				t.Fatalf("%s: %s slice list took %v", when, ua, d)
			}
			if _, err := cs.CoreV1().Services(ns).Get(ctx, "sa-web", metav1.GetOptions{}); err != nil {
				t.Fatalf("%s: %s service get: %v", when, ua, err)
			}
			if n, ok := informerSynced(cs, 10*time.Second); !ok || n == 0 {
				t.Fatalf("%s: %s informer synced %v with %d slices", when, ua, ok, n)
			}
		}
	}
	blackHole(t, h, relay)
	check("offline", h)
	h.Stop()
	h2 := startHubIn(t, dir, relay.URL(), "--heartbeat-timeout-seconds=1")
	check("hub restarted offline", h2)
}
