package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/e2e/harness"
)

// hubPost posts to the hub API and returns the code and the Status message.
func hubPost(t *testing.T, h *harness.Hub, path string) (int, string) {
	t.Helper()
	resp, err := http.Post(h.HubURL+path, "application/json", nil)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var st struct {
		Kind, Status, Message string
		Code                  int
	}
	if err := json.Unmarshal(b, &st); err != nil || st.Kind != "Status" || st.Code != resp.StatusCode {
		t.Fatalf("POST %s: %d %q is not a Status with the code", path, resp.StatusCode, b)
	}
	return resp.StatusCode, st.Message
}

// hubPods reads GET /pods and returns the pods' namespace/name.
func hubPods(t *testing.T, h *harness.Hub) []string {
	t.Helper()
	code, body, err := h.Get("/pods")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /pods: %d %v %s", code, err, body)
	}
	var l corev1.PodList
	if err := json.Unmarshal([]byte(body), &l); err != nil || l.Kind != "PodList" {
		t.Fatalf("GET /pods: not a PodList: %v %.200s", err, body)
	}
	var out []string
	for _, p := range l.Items {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

// setCondition sets one pod condition through the admin client, as yurt-manager does.
func setCondition(t *testing.T, ns, name string, c corev1.PodCondition) {
	t.Helper()
	ctx := context.Background()
	for i := 0; ; i++ {
		p, err := cluster.Admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.LastTransitionTime = metav1.Now()
		found := false
		for j := range p.Status.Conditions {
			if p.Status.Conditions[j].Type == c.Type {
				p.Status.Conditions[j], found = c, true
			}
		}
		if !found {
			p.Status.Conditions = append(p.Status.Conditions, c)
		}
		_, err = cluster.Admin.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) || i > 5 {
			t.Fatal(err)
		}
	}
}

// daemonPod waits for the DaemonSet's pod on the node with revision hash (any when ""), binds it
// to the node as the scheduler would (no scheduler runs), and returns it.
func daemonPod(t *testing.T, ns, ds, hash string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	var pod *corev1.Pod
	eventually(t, 60*time.Second, "daemonset pod "+hash, func() error {
		l, err := cluster.Admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + ds})
		if err != nil {
			return err
		}
		for i := range l.Items {
			p := &l.Items[i]
			if p.DeletionTimestamp == nil && (hash == "" || p.Labels["controller-revision-hash"] == hash) {
				pod = p
				return nil
			}
		}
		return fmt.Errorf("%d pods, none with hash %q", len(l.Items), hash)
	})
	if pod.Spec.NodeName == "" {
		b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: ns}, Target: corev1.ObjectReference{Kind: "Node", Name: harness.NodeName}}
		if err := cluster.Admin.CoreV1().Pods(ns).Bind(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatalf("bind %s: %v", pod.Name, err)
		}
	}
	p, err := cluster.Admin.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newestRevision is the hash of the DaemonSet's newest ControllerRevision.
func newestRevision(t *testing.T, ns, ds string, not string) string {
	t.Helper()
	var hash string
	eventually(t, 30*time.Second, "a new controller revision", func() error {
		l, err := cluster.Admin.AppsV1().ControllerRevisions(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + ds})
		if err != nil {
			return err
		}
		var best int64 = -1
		for _, r := range l.Items {
			if r.Revision > best {
				best, hash = r.Revision, r.Labels["controller-revision-hash"]
			}
		}
		if hash == "" || hash == not {
			return fmt.Errorf("newest revision %q", hash)
		}
		return nil
	})
	return hash
}

// TestOTAUpgradeDaemonSetPod drives YurtHub's OTA flow against the real apiserver and
// kube-controller-manager's daemonset controller: a DaemonSet with the OTA strategy (OnDelete and
// apps.openyurt.io/update-strategy: OTA) gets a new template; with PodNeedUpgrade set as
// yurt-manager sets it, POST .../imagepull marks PodImageReady, and POST .../upgrade deletes the
// pod in the cloud so the controller recreates it with the new template hash. GET /pods lists
// the node's pods from kubelet's cache while the cloud is unreachable; upgrade then says 503.
func TestOTAUpgradeDaemonSetPod(t *testing.T) {
	ctx := context.Background()
	const ns, name = "ota-e2e", "ota-agent"
	if err := cluster.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	kcm, err := cluster.StartControllerManager(ctx, harness.ControllerOptions{Controllers: []string{"daemonset"}})
	if err != nil {
		t.Fatal(err)
	}
	// The node is Ready, as a kubelet would report it (put back as it was at the end).
	node, err := cluster.Admin.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	conditions := node.Status.Conditions
	// No garbage collector runs: the DaemonSet's pods are removed by hand, after the controller.
	t.Cleanup(func() {
		ctx := context.Background()
		_ = cluster.Admin.AppsV1().DaemonSets(ns).Delete(ctx, name, metav1.DeleteOptions{})
		kcm.Stop()
		if t.Failed() {
			t.Logf("kube-controller-manager log:\n%s", tailString(kcm.Log(), 3000))
		}
		_ = cluster.Admin.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}, metav1.ListOptions{})
		if n, err := cluster.Admin.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{}); err == nil {
			n.Status.Conditions = conditions
			_, _ = cluster.Admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		}
	})
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := cluster.Admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	relay, err := harness.NewRelay(strings.TrimPrefix(cluster.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Refuse()
	h := startHubServers(t, relay.URL())

	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{"apps.openyurt.io/update-strategy": "OTA"}},
		Spec: appsv1.DaemonSetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken: ptr(false),
					Tolerations:                  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers:                   []corev1.Container{{Name: "agent", Image: "registry.example/agent:1"}},
				},
			},
		},
	}
	if _, err := cluster.Admin.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	old := daemonPod(t, ns, name, "")
	oldHash := old.Labels["controller-revision-hash"]

	// kubelet lists and watches the node's pods through the hub, so they are in its cache.
	kubelet := h.Client("kubelet/v1.34.4 (linux/amd64) kubernetes/abc", true) // protobuf, as kubelet: GET /pods converts
	eventually(t, 20*time.Second, "the pod in kubelet's view through the hub", func() error {
		l, err := kubelet.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + harness.NodeName})
		if err != nil {
			return err
		}
		for _, p := range l.Items {
			if p.Name == old.Name {
				return nil
			}
		}
		return fmt.Errorf("%d pods, not %s", len(l.Items), old.Name)
	})
	eventually(t, 60*time.Second, "GET /pods online", func() error {
		if got := strings.Join(hubPods(t, h), ","); !strings.Contains(got, ns+"/"+old.Name) {
			return fmt.Errorf("GET /pods: %s", got)
		}
		return nil
	})

	// Not upgradable yet: YurtHub's 403.
	upgrade := "/openyurt.io/v1/namespaces/" + ns + "/pods/" + old.Name + "/upgrade"
	imagePull := "/openyurt.io/v1/namespaces/" + ns + "/pods/" + old.Name + "/imagepull"
	if code, msg := hubPost(t, h, upgrade); code != http.StatusForbidden {
		t.Fatalf("upgrade without PodNeedUpgrade: %d %s, want 403", code, msg)
	}

	// A new template: with OnDelete the pod stays; yurt-manager marks it.
	cur, err := cluster.Admin.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Template.Spec.Containers[0].Image = "registry.example/agent:2"
	if _, err := cluster.Admin.AppsV1().DaemonSets(ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	newHash := newestRevision(t, ns, name, oldHash)
	setCondition(t, ns, old.Name, corev1.PodCondition{Type: "PodNeedUpgrade", Status: corev1.ConditionTrue, Message: "controllerrevision: " + newHash})

	// imagepull: PodImageReady False for the new revision, patched by field manager nodehub.
	if code, msg := hubPost(t, h, imagePull); code != http.StatusOK || !strings.Contains(msg, "Image pre-pull requested") {
		t.Fatalf("imagepull: %d %s", code, msg)
	}
	p, err := cluster.Admin.CoreV1().Pods(ns).Get(ctx, old.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var img *corev1.PodCondition
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == "PodImageReady" {
			img = &p.Status.Conditions[i]
		}
	}
	if img == nil || img.Status != corev1.ConditionFalse || img.Message != "controllerrevision: "+newHash {
		t.Fatalf("PodImageReady after imagepull: %+v", img)
	}
	managers := ""
	for _, mf := range p.ManagedFields {
		managers += mf.Manager + "/" + mf.Subresource + " "
	}
	if !strings.Contains(managers, "nodehub/status") {
		t.Fatalf("managed fields %q: no nodehub on status", managers)
	}
	// The image is not there yet: YurtHub refuses the upgrade (403) until yurt-manager says so.
	if code, msg := hubPost(t, h, upgrade); code != http.StatusForbidden || !strings.Contains(msg, "image is not ready") {
		t.Fatalf("upgrade with the image not ready: %d %s, want 403", code, msg)
	}
	setCondition(t, ns, old.Name, corev1.PodCondition{Type: "PodImageReady", Status: corev1.ConditionTrue, Message: "controllerrevision: " + newHash})

	// Another node's pod is refused the same way (403), and a bad name is a 400.
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: ns,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: name, UID: cur.UID}}},
		Spec: corev1.PodSpec{NodeName: "edge-2", AutomountServiceAccountToken: ptr(false), Containers: []corev1.Container{{Name: "a", Image: "x"}}}}
	if _, err := cluster.Admin.CoreV1().Pods(ns).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	setCondition(t, ns, "elsewhere", corev1.PodCondition{Type: "PodNeedUpgrade", Status: corev1.ConditionTrue, Message: "controllerrevision: " + newHash})
	if code, msg := hubPost(t, h, "/openyurt.io/v1/namespaces/"+ns+"/pods/elsewhere/upgrade"); code != http.StatusForbidden || !strings.Contains(msg, "not on this node") {
		t.Fatalf("another node's pod: %d %s, want 403", code, msg)
	}
	if code, _ := hubPost(t, h, "/openyurt.io/v1/namespaces/"+ns+"/pods/Bad_Name/upgrade"); code != http.StatusBadRequest {
		t.Fatalf("bad pod name: %d, want 400", code)
	}

	if code, msg := hubPost(t, h, upgrade); code != http.StatusOK || msg != "Start updating pod "+ns+"/"+old.Name {
		t.Fatalf("upgrade: %d %s", code, msg)
	}
	// The hub deleted it in the cloud; with no kubelet, the test confirms the end of the
	// containers as kubelet would, and the controller recreates the pod from the new template.
	eventually(t, 60*time.Second, "the old pod deleted", func() error {
		p, err := cluster.Admin.CoreV1().Pods(ns).Get(ctx, old.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if p.DeletionTimestamp == nil {
			return fmt.Errorf("not being deleted")
		}
		return cluster.Admin.CoreV1().Pods(ns).Delete(ctx, old.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	})
	fresh := daemonPod(t, ns, name, newHash)
	if fresh.Name == old.Name || fresh.Spec.Containers[0].Image != "registry.example/agent:2" {
		t.Fatalf("new pod %s (%s), want a new one with the new template", fresh.Name, fresh.Spec.Containers[0].Image)
	}
	t.Logf("pod %s (revision %s) upgraded to %s (revision %s)", old.Name, oldHash, fresh.Name, newHash)
	if v, _ := h.Metric(`nodehub_ota_actions_total{action="upgrade",code="200"}`); v != 1 {
		t.Fatalf("nodehub_ota_actions_total upgrade 200 = %v", v)
	}

	// kubelet sees the new pod through the hub, then the cloud goes away.
	eventually(t, 20*time.Second, "the new pod in kubelet's cache", func() error {
		l, err := kubelet.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + harness.NodeName})
		if err != nil {
			return err
		}
		for _, p := range l.Items {
			if p.Name == fresh.Name {
				return nil
			}
		}
		return fmt.Errorf("not yet")
	})
	relay.Refuse()
	eventually(t, 20*time.Second, "the hub offline", func() error {
		if v, _ := h.Metric(`nodehub_server_healthy{server="` + relay.Addr + `"}`); v != 0 {
			return fmt.Errorf("server healthy %v", v)
		}
		return nil
	})
	eventually(t, 60*time.Second, "GET /pods offline", func() error {
		got := strings.Join(hubPods(t, h), ",")
		if !strings.Contains(got, ns+"/"+fresh.Name) || strings.Contains(got, ns+"/"+old.Name) {
			return fmt.Errorf("GET /pods offline: %s", got)
		}
		return nil
	})
	freshUpgrade := "/openyurt.io/v1/namespaces/" + ns + "/pods/" + fresh.Name + "/upgrade"
	if code, msg := hubPost(t, h, freshUpgrade); code != http.StatusServiceUnavailable {
		t.Fatalf("upgrade offline: %d %s, want 503", code, msg)
	}
}

// TestOTAUpgradeStaticPod: a static pod (owned by the Node, named <name>-<node>) with
// PodNeedUpgrade gets the manifest of ConfigMap yurt-static-set-<name> written into
// --static-pod-path, atomically, the old one kept as a dot file kubelet ignores; without the
// ConfigMap the upgrade is refused with 403.
func TestOTAUpgradeStaticPod(t *testing.T) {
	ctx := context.Background()
	const ns, static = "kube-system", "edge-agent"
	if err := cluster.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	// The hub reads the ConfigMap with the node's identity, as YurtHub does with its own: the
	// node group gets read access to it (OpenYurt grants its hubs the same).
	if err := cluster.BindNodes(ctx, "nodehub-e2e-static-set", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}); err != nil {
		t.Fatal(err)
	}
	manifests := t.TempDir()
	if err := os.WriteFile(filepath.Join(manifests, "edge-agent.yaml"), []byte("old manifest\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := startHub(t, "--static-pod-path="+manifests)
	podName := static + "-" + harness.NodeName
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName, Namespace: ns,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: harness.NodeName, UID: "00000000-0000-0000-0000-000000000001"}}},
		Spec: corev1.PodSpec{NodeName: harness.NodeName, AutomountServiceAccountToken: ptr(false),
			Containers: []corev1.Container{{Name: "agent", Image: "registry.example/agent:1"}}},
	}
	if _, err := cluster.Admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Admin.CoreV1().Pods(ns).Delete(context.Background(), podName, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	})
	setCondition(t, ns, podName, corev1.PodCondition{Type: "PodNeedUpgrade", Status: corev1.ConditionTrue, Message: "controllerrevision: abc"})
	upgrade := "/openyurt.io/v1/namespaces/" + ns + "/pods/" + podName + "/upgrade"
	// The node authorizer lets the node read the pod once its graph has the pod's binding (it
	// follows the apiserver's pods asynchronously): until then the hub's pre-check is refused.
	eventually(t, 60*time.Second, "upgrade without the ConfigMap answered 403 \"Configmap for static pod does not exist\"", func() error {
		if code, msg := hubPost(t, h, upgrade); code != http.StatusForbidden || !strings.Contains(msg, "Configmap for static pod does not exist") {
			return errorf("%d %s", code, msg)
		}
		return nil
	})
	newManifest := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: edge-agent\n  namespace: kube-system\nspec:\n  containers:\n  - name: agent\n    image: registry.example/agent:2\n"
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "yurt-static-set-" + static, Namespace: ns}, Data: map[string]string{"edge-agent": newManifest}}
	if _, err := cluster.Admin.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Admin.CoreV1().ConfigMaps(ns).Delete(context.Background(), cm.Name, metav1.DeleteOptions{})
	})
	if code, msg := hubPost(t, h, upgrade); code != http.StatusOK {
		t.Fatalf("upgrade: %d %s", code, msg)
	}
	if b, err := os.ReadFile(filepath.Join(manifests, "edge-agent.yaml")); err != nil || string(b) != newManifest {
		t.Fatalf("manifest after the upgrade: %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(manifests, ".edge-agent.yaml.bak")); err != nil || string(b) != "old manifest\n" {
		t.Fatalf("backup: %q %v", b, err)
	}
	entries, _ := os.ReadDir(manifests)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Fatalf("temp file left behind: %s", e.Name())
		}
	}
}
