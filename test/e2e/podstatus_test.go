package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"nodehub/e2e/harness"
)

// podStatusWriter creates a ServiceAccount in ns that may read and patch pods and their status
// there (so its own cache holds them, and the cloud would take its status writes), and returns a
// token for it.
func podStatusWriter(t *testing.T, ctx context.Context, ns, name string) string {
	t.Helper()
	if _, err := cluster.Admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "pods/status"}, Verbs: []string{"get", "list", "watch", "patch", "update"}}}}
	if _, err := cluster.Admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}}
	if _, err := cluster.Admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tr, err := cluster.Admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// Offline, a pod's status is the node's kubelet's word alone. A pod whose ServiceAccount may read
// and patch pods (its own cache holds them) sends, in kubelet's User-Agent, the status write
// kubelet would send for another pod of the node, with an address it chose: through the secure
// port and over loopback with its token, as a patch and as an update. Each is refused with a 503
// Status, and kube-proxy's list and open watch of the node's EndpointSlices (the real controller's)
// never show the forged address, offline or after the return; the node's kubelet's own offline
// status write still moves its pod's endpoint.
func TestOfflinePodStatusOnlyKubeletsWord(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := "epforge"
	if err := cluster.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	cleanupPods(t, ns)
	bindNodes(t, "e2e-proxy-reader", rbacv1.PolicyRule{APIGroups: []string{"", "discovery.k8s.io"}, Resources: []string{"services", "endpointslices"}, Verbs: []string{"get", "list", "watch"}})
	kcm, err := cluster.StartControllerManager(ctx, harness.ControllerOptions{Controllers: append(slices.Clone(harness.DefaultControllers), "endpointslice")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kcm.Stop)
	go cluster.ApproveServingCSRs(ctx)
	if _, err := cluster.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: harness.NodeName}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	ips := map[string]string{"victim": "10.247.1.1", "own": "10.247.1.2"}
	uids := map[string]types.UID{}
	for _, name := range []string{"victim", "own"} {
		p := newPod(ns, name)
		p.Labels = map[string]string{"app": "forge"}
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080}}
		uids[name] = createReadyPod(t, ctx, p, ips[name]).UID
	}
	if _, err := cluster.Admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "forge"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "forge"},
		Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt(8080)}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	services := []string{"forge"}
	before := []want{{"victim", ips["victim"], true, true}, {"own", ips["own"], true, true}}
	eventually(t, 60*time.Second, "the EndpointSlice controller's slice", func() error { return listed(ctx, cluster.Admin, ns, services, before...) })
	token := podStatusWriter(t, ctx, ns, "mallory")

	relay, err := harness.NewRelay(strings.TrimPrefix(cluster.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Refuse()
	h := startHubServers(t, relay.URL(), "--heartbeat-timeout-seconds=1")
	waitServing(t, h)
	kubelet := h.Client(kubeletUA, true)
	proxy := h.Client(kubeProxyUA, false)
	// The pod, in kubelet's User-Agent: through the secure port, and over loopback with its token.
	secure := podConfig(h, token)
	secure.UserAgent = kubeletUA
	loop := &rest.Config{Host: h.ProxyURL, BearerToken: token, UserAgent: kubeletUA}
	pods := map[string]kubernetes.Interface{"secure port": kubernetes.NewForConfigOrDie(secure), "loopback": kubernetes.NewForConfigOrDie(loop)}
	// Online: kubelet's and the pod's caches hold the pods; kube-proxy watches the slices.
	if _, err := kubelet.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + harness.NodeName}); err != nil {
		t.Fatal(err)
	}
	for name, cs := range pods {
		if _, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatalf("%s: the pod's list of pods: %v", name, err)
		}
		if _, err := cs.CoreV1().Pods(ns).Get(ctx, "victim", metav1.GetOptions{}); err != nil {
			t.Fatalf("%s: the pod's get: %v", name, err)
		}
	}
	w := watchSlices(t, ctx, "kube-proxy", proxy, ns)
	eventually(t, 30*time.Second, "online: kube-proxy has the cloud's slice", func() error { return watched([]*sliceWatcher{w}, services, before...) })
	cacheWritten(t, h)

	blackHole(t, h, relay)
	const forged = "10.66.6.6"
	for name, cs := range pods {
		err := kubeletPodStatus(ctx, cs, ns, "victim", uids["victim"], forged, true)
		if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "only the node's kubelet may report pod status offline") {
			t.Fatalf("%s: the pod's offline status patch of another pod: %v, want the 503 Status", name, err)
		}
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "victim", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s: the pod's offline get: %v", name, err)
		}
		p.Status.PodIP, p.Status.PodIPs = forged, []corev1.PodIP{{IP: forged}}
		if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); !apierrors.IsServiceUnavailable(err) {
			t.Fatalf("%s: the pod's offline status update: %v, want 503", name, err)
		}
		if _, err := cs.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{}); !apierrors.IsServiceUnavailable(err) {
			t.Fatalf("%s: the pod's offline update of the whole pod: %v, want 503", name, err)
		}
	}
	// The node's kubelet reports its pod "own" at a new address: once kube-proxy has that, the
	// Fixer's view it was served holds every report made before it.
	if err := kubeletPodStatus(ctx, kubelet, ns, "own", uids["own"], "10.247.1.12", true); err != nil {
		t.Fatalf("kubelet's offline status write: %v", err)
	}
	offline := []want{{"victim", ips["victim"], true, true}, {"own", "10.247.1.12", true, true}}
	eventually(t, 30*time.Second, "offline: kube-proxy follows the node's kubelet alone", func() error {
		if err := watched([]*sliceWatcher{w}, services, offline...); err != nil {
			return err
		}
		return listed(ctx, proxy, ns, services, offline...)
	})
	if err := listed(ctx, h.Client(kubeProxyUA, true), ns, services, offline...); err != nil {
		t.Fatalf("offline, kube-proxy's protobuf list: %v", err)
	}
	if w.saw(forged) {
		t.Fatal("offline, kube-proxy's watch was sent the pod's forged address")
	}

	// The return: the cloud's word on the victim (corrections last until the cloud caught up).
	if err := relay.Pass(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "hub back online", func() error {
		if v, _ := h.Metric(fmt.Sprintf(`nodehub_server_healthy{server="%s"}`, relay.Addr)); v != 1 {
			return fmt.Errorf("server not healthy yet")
		}
		return nil
	})
	if err := listed(ctx, proxy, ns, services, offline[0]); err != nil {
		t.Fatalf("after the return: %v", err)
	}
	if w.saw(forged) {
		t.Fatal("kube-proxy's watch was sent the pod's forged address")
	}
}
