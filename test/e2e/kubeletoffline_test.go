package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
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

// tokenRequestFor is kubelet's request for a pod's projected ServiceAccount token.
func tokenRequestFor(pod *corev1.Pod) *authenticationv1.TokenRequest {
	return &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3607)),
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}
}

// jwtClaims reads a JWT's claims without checking it.
func jwtClaims(t *testing.T, tok string) map[string]any {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", tok)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// Offline, kubelet's token request for a pod is answered with the last token the cloud issued for
// the same request, also after the hub was killed and restarted offline (a reboot); another client
// asking the same does not get it; a pod whose token was never issued gets a stand-in. This node's
// registration is answered 409 AlreadyExists; other creates stay refused.
func TestOfflineTokensAndNodeRegistration(t *testing.T) {
	ctx := context.Background()
	ns := "kubelet-tokens"
	if err := cluster.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pods := map[string]*corev1.Pod{}
	for _, n := range []string{"tok-seen-1", "tok-new-1"} {
		p := newPod(ns, n)
		p.Spec.ServiceAccountName = "app"
		p.Spec.Volumes = []corev1.Volume{{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr(int64(3607))}}}}}}}
		got, err := cluster.Admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			got, err = cluster.Admin.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		pods[n] = got
	}
	relay, err := harness.NewRelay(strings.TrimPrefix(cluster.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Refuse()
	dir := t.TempDir()
	h := startHubIn(t, dir, relay.URL(), "--heartbeat-timeout-seconds=1")
	kubelet := h.Client(kubeletUA, true)
	issued, err := kubelet.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "app", tokenRequestFor(pods["tok-seen-1"]), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("online token request as the node: %v", err)
	}
	node, err := kubelet.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	offlineChecks := func(when string, h *harness.Hub) {
		t.Helper()
		kubelet := h.Client(kubeletUA, true)
		// Another client on the node with a credential of its own (here: the pod's token).
		otherCfg := h.Config(kubeletUA, true)
		otherCfg.BearerToken = issued.Status.Token
		other := kubernetes.NewForConfigOrDie(otherCfg)
		got, err := kubelet.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "app", tokenRequestFor(pods["tok-seen-1"]), metav1.CreateOptions{})
		if err != nil || got.Status.Token != issued.Status.Token || !got.Status.ExpirationTimestamp.Equal(&issued.Status.ExpirationTimestamp) {
			t.Fatalf("%s: kubelet's token request: %v (same token: %v)", when, err, err == nil && got.Status.Token == issued.Status.Token)
		}
		if _, err := other.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "app", tokenRequestFor(pods["tok-seen-1"]), metav1.CreateOptions{}); !apierrors.IsServiceUnavailable(err) {
			t.Fatalf("%s: the same request from another client: err %v, want 503 (never the node's token)", when, err)
		}
		standIn, err := kubelet.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "app", tokenRequestFor(pods["tok-new-1"]), metav1.CreateOptions{})
		if err != nil || standIn.Status.Token == issued.Status.Token {
			t.Fatalf("%s: a pod never issued a token: %v", when, err)
		}
		if c := jwtClaims(t, standIn.Status.Token); c["iss"] != "nodehub-offline-stand-in" || c["sub"] != "system:serviceaccount:"+ns+":app" {
			t.Fatalf("%s: stand-in claims %v", when, c)
		}
		if d := time.Until(standIn.Status.ExpirationTimestamp.Time); d <= 0 || d > 2*time.Minute {
			t.Fatalf("%s: stand-in expires in %v", when, d)
		}
		// Registration of this node: the apiserver's answer for a node that exists.
		reg := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: harness.NodeName, Labels: node.Labels}}
		if _, err := kubelet.CoreV1().Nodes().Create(ctx, reg, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s: registering this node: err %v, want AlreadyExists", when, err)
		}
		if _, err := kubelet.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{}); err != nil {
			t.Fatalf("%s: reading the node after registration: %v", when, err)
		}
		if _, err := kubelet.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "another-node"}}, metav1.CreateOptions{}); !apierrors.IsServiceUnavailable(err) {
			t.Fatalf("%s: registering another node: err %v, want 503", when, err)
		}
		if _, err := kubelet.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "lost"}}, metav1.CreateOptions{}); !apierrors.IsServiceUnavailable(err) {
			t.Fatalf("%s: another create: err %v, want 503", when, err)
		}
	}
	time.Sleep(12 * time.Second) // the token store makes a batch durable within 10 s
	blackHole(t, h, relay)
	offlineChecks("offline", h)

	// A power cut: the hub is killed, and starts again with the link still black-holed.
	h.Kill()
	h2 := startHubIn(t, dir, relay.URL(), "--heartbeat-timeout-seconds=1")
	offlineChecks("after a kill and a restart offline", h2)
	tokDir := filepath.Join(h2.RootDir, "tokens")
	fi, err := os.Stat(tokDir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("token directory: %v %v", fi, err)
	}
	des, _ := os.ReadDir(tokDir)
	if len(des) != 1 {
		t.Fatalf("%d token files, want 1 (a stand-in is never kept)", len(des))
	}
	if fi, _ := des[0].Info(); fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode %v", fi.Mode())
	}
	if strings.HasPrefix(tokDir, h2.CacheDir) {
		t.Fatal("token store under the cache directory")
	}
}
