package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	return saToken(t, ctx, ns, name, "pool-reader", rbacv1.PolicyRule{Verbs: []string{"get", "list", "watch"},
		APIGroups: []string{"", "discovery.k8s.io"}, Resources: []string{"services", "endpointslices"}})
}

// saToken creates the ServiceAccount ns/name, bound to the ClusterRole e2e-<role> that rule
// makes, and returns a token for it.
func saToken(t *testing.T, ctx context.Context, ns, name, role string, rule rbacv1.PolicyRule) string {
	t.Helper()
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-" + role}, Rules: []rbacv1.PolicyRule{rule}}
	if _, err := cluster.Admin.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := cluster.Admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-" + role + "-" + ns + "-" + name},
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
	// A probe's timeout (and a read's wait for the cloud's answer) of 5 s: an offline list that
	// tried the cloud first would take that long; one answered from the cache takes far less, on
	// a loaded machine too.
	h := startHubIn(t, dir, relay.URL(), "--heartbeat-timeout-seconds=5")
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
	cacheWritten(t, h)

	check := func(when string, h *harness.Hub) {
		t.Helper()
		for ua, mk := range clients {
			cs := mk(h) // a new client: the pod restarted
			start := time.Now()
			l, err := cs.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
			if err != nil || len(l.Items) == 0 {
				t.Fatalf("%s: %s slice list: %v", when, ua, err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("%s: %s slice list took %v (the cloud's 5 s, not the cache?)", when, ua, d)
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
	h2 := startHubIn(t, dir, relay.URL(), "--heartbeat-timeout-seconds=5")
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
		deleteAtEnd(t, ns, n)
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
	// The token store saves a batch within 10 s of its first change (a file renamed into place,
	// which a killed process keeps): wait for the issued token's file, not for 12 s.
	eventually(t, 60*time.Second, "the issued token saved", func() error {
		des, err := os.ReadDir(filepath.Join(h.RootDir, "tokens"))
		for _, de := range des {
			if !strings.HasPrefix(de.Name(), ".") {
				return nil
			}
		}
		return errorf("no token file yet (%v)", err)
	})
	// A registration on its way when the link is cut gets the offline answer, not a 503.
	if err := relay.BlackHole(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := kubelet.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: harness.NodeName}}, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("registration sent into the cut: err %v, want AlreadyExists", err)
	}
	t.Logf("registration sent into the cut answered after %v", time.Since(start).Round(time.Millisecond))
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

func autonomyOf(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == "Autonomy" {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// The Autonomy condition as YurtHub v1.7 reports it: in kubelet's GET of its node (protobuf and
// JSON, online and offline) and written to the cloud's node status when it changes: False without
// the annotation or for a node labelled not an edge worker, True with it, Unknown after repeated
// cache write failures (a full disk), True again once the cache works.
func TestAutonomyCondition(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs to fill")
	}
	ctx := context.Background()
	mnt := filepath.Join(t.TempDir(), "cache")
	os.MkdirAll(mnt, 0o700)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v %s", err, out)
	}
	defer exec.Command("umount", "-l", mnt).Run()
	patchNode := func(patch string) {
		t.Helper()
		if _, err := cluster.Admin.CoreV1().Nodes().Patch(ctx, harness.NodeName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	defer patchNode(`{"metadata":{"annotations":{"node.beta.openyurt.io/autonomy":null},"labels":{"openyurt.io/is-edge-worker":null}}}`)
	patchNode(`{"metadata":{"annotations":{"node.beta.openyurt.io/autonomy":null},"labels":{"openyurt.io/is-edge-worker":null}}}`)
	relay, err := harness.NewRelay(strings.TrimPrefix(cluster.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Refuse()
	h := startHubServers(t, relay.URL(), "--disk-cache-path="+mnt, "--heartbeat-timeout-seconds=1")
	kubelet := h.Client(kubeletUA, true)
	kubeletJSON := h.Client(kubeletUA, false)

	// expect GETs the node as kubelet until the answer carries the condition, then waits for the
	// cloud's node status to carry it too.
	expect := func(what string, cl *kubernetes.Clientset, status corev1.ConditionStatus, reason string, inCloud bool) {
		t.Helper()
		eventually(t, 60*time.Second, what+": kubelet's node answer", func() error {
			n, err := cl.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if c := autonomyOf(n); c == nil || c.Status != status || c.Reason != reason {
				return errorf("condition %+v, want %s %q", c, status, reason)
			}
			return nil
		})
		if !inCloud {
			return
		}
		eventually(t, 60*time.Second, what+": the cloud's node status", func() error {
			n, err := cluster.Admin.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if c := autonomyOf(n); c == nil || c.Status != status || c.Reason != reason {
				return errorf("condition %+v, want %s %q", c, status, reason)
			}
			return nil
		})
	}
	expect("no annotation", kubelet, corev1.ConditionFalse, "autonomy disabled", true)
	patchNode(`{"metadata":{"annotations":{"node.beta.openyurt.io/autonomy":"true"}}}`)
	expect("annotated", kubelet, corev1.ConditionTrue, "autonomy enabled successfully", true)
	expect("annotated, JSON", kubeletJSON, corev1.ConditionTrue, "autonomy enabled successfully", false)
	patchNode(`{"metadata":{"labels":{"openyurt.io/is-edge-worker":"false"}}}`)
	expect("not an edge worker", kubeletJSON, corev1.ConditionFalse, "autonomy disabled", true)
	patchNode(`{"metadata":{"labels":{"openyurt.io/is-edge-worker":"true"}}}`)
	expect("an edge worker", kubelet, corev1.ConditionTrue, "autonomy enabled successfully", true)

	// Fill the cache's disk: every cache write fails. Kubelet keeps reading (pods, then its node).
	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	f.Close()
	ns := "autonomy"
	if err := cluster.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	defer cluster.Admin.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}, metav1.ListOptions{})
	for i := 0; ; i++ {
		if _, err := cluster.Admin.CoreV1().Pods(ns).Create(ctx, newPod(ns, fmt.Sprintf("a-%d-%d", time.Now().UnixNano(), i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := kubelet.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + harness.NodeName}); err != nil {
			t.Fatal(err)
		}
		cacheWritten(t, h)
		n, err := kubelet.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c := autonomyOf(n); c != nil && c.Status == corev1.ConditionUnknown {
			if c.Reason != "cache failed" || i < 3 {
				t.Fatalf("after %d failing rounds: %+v", i+1, c)
			}
			t.Logf("Unknown after %d reads of the node with failing cache writes: %s", i+1, c.Message)
			break
		}
		if i > 10 {
			t.Fatalf("still %+v after %d rounds of failing cache writes", autonomyOf(n), i+1)
		}
	}
	expect("cache failing", kubelet, corev1.ConditionUnknown, "cache failed", true)
	os.Remove(filler)
	eventually(t, 20*time.Second, "cache works again", func() error {
		if _, err := kubelet.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + harness.NodeName}); err != nil {
			return err
		}
		cacheWritten(t, h)
		n, err := kubelet.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c := autonomyOf(n); c == nil || c.Status != corev1.ConditionTrue {
			return errorf("condition %+v", c)
		}
		return nil
	})
	expect("cache works again", kubelet, corev1.ConditionTrue, "autonomy enabled successfully", true)

	// Offline: kubelet's node from the cache carries it.
	cacheWritten(t, h)
	blackHole(t, h, relay)
	expect("offline", kubelet, corev1.ConditionTrue, "autonomy enabled successfully", false)
	expect("offline, JSON", kubeletJSON, corev1.ConditionTrue, "autonomy enabled successfully", false)
}
