package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"nodehub/cache"
	"nodehub/e2e/harness"
)

func podNames(t *testing.T, cl *kubernetes.Clientset, ns string, o metav1.ListOptions) []string {
	t.Helper()
	l, err := cl.CoreV1().Pods(ns).List(context.Background(), o)
	if err != nil {
		t.Fatalf("list pods %+v: %v", o, err)
	}
	var out []string
	for _, p := range l.Items {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	sort.Strings(out)
	return out
}

// kubectl runs the real kubectl against the hub with a credential-less kubeconfig.
func kubectl(t *testing.T, h *harness.Hub, args ...string) string {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	os.WriteFile(kc, []byte(fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: hub, cluster: {server: %q}}]\nusers: [{name: node, user: {}}]\ncontexts: [{name: hub, context: {cluster: hub, user: node}}]\ncurrent-context: hub\n", h.ProxyURL)), 0o600)
	cmd := exec.Command(filepath.Join(cluster.BinDir, "kubectl"), append([]string{"--kubeconfig", kc, "--request-timeout=10s"}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir()) // no discovery cache of kubectl's own
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// watchEvents opens a raw JSON watch through the hub and returns its events as they come.
func watchEvents(t *testing.T, ctx context.Context, h *harness.Hub, path, ua string) (<-chan map[string]any, *http.Response) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.ProxyURL+path, nil)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", ua)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("watch %s: %s", path, resp.Status)
	}
	ch := make(chan map[string]any, 100)
	go func() {
		defer close(ch)
		dec := json.NewDecoder(bufio.NewReader(resp.Body))
		for {
			var ev map[string]any
			if err := dec.Decode(&ev); err != nil {
				return
			}
			ch <- ev
		}
	}()
	return ch, resp
}

func TestOfflineNodeKeepsRunning(t *testing.T) {
	ctx := context.Background()
	ns := "offline"
	if err := cluster.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	bindNodes(t, "e2e-proxy-reader", rbacv1.PolicyRule{APIGroups: []string{"", "discovery.k8s.io"}, Resources: []string{"services", "endpointslices"}, Verbs: []string{"get", "list", "watch"}})
	for _, n := range []string{"off-a", "off-b"} {
		p := newPod(ns, n)
		p.Labels = map[string]string{"app": "e2e-off", "tier": strings.TrimPrefix(n, "off-")}
		if _, err := cluster.Admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		deleteAtEnd(t, ns, n)
	}
	deleteAtEnd(t, ns, "off-c") // made later, while the link is cut
	makeService(t, ctx, ns, "web")

	relay, err := harness.NewRelay(strings.TrimPrefix(cluster.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Refuse()
	h := startHubServers(t, relay.URL(), "--heartbeat-timeout-seconds=1")
	kubelet := h.Client(kubeletUA, true)
	proxy := h.Client(kubeProxyUA, false)
	nodeSel := metav1.ListOptions{FieldSelector: "spec.nodeName=" + harness.NodeName}
	labelSel := metav1.ListOptions{LabelSelector: "app=e2e-off,tier=a", FieldSelector: "spec.nodeName=" + harness.NodeName}

	// Online: the node's clients read through the hub (and so fill its cache).
	onlinePods := podNames(t, kubelet, "", nodeSel)
	if got := podNames(t, kubelet, ns, labelSel); strings.Join(got, ",") != ns+"/off-a" {
		t.Fatalf("online label list: %v", got)
	}
	if _, err := kubelet.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := proxy.CoreV1().Services("").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	kubectl(t, h, "get", "--raw", "/version")
	kubectl(t, h, "get", "pods", "-o", "wide", "-A", "--field-selector", "spec.nodeName="+harness.NodeName)
	kubectl(t, h, "get", "svc", "-o", "wide", "-n", ns)
	eventually(t, 60*time.Second, "reads cached", func() error {
		for _, f := range []string{"kubelet/pods.v1.core/" + ns + "/off-a", "kubelet/nodes.v1.core/" + harness.NodeName, "kube-proxy/services.v1.core/" + ns + "/web"} {
			if _, _, err := cache.ReadFile(filepath.Join(h.CacheDir, f)); err != nil {
				// Services are pool-scope: once the shared store serves them, its copy is
				// cached as the hub's own.
				if _, _, err2 := cache.ReadFile(filepath.Join(h.CacheDir, strings.Replace(f, "kube-proxy/", "nodehub/", 1))); err2 != nil {
					return err
				}
			}
		}
		return nil
	})

	// A watch proxied to the cloud before the cut must end once the hub knows it is offline.
	wctx0, cancel0 := context.WithCancel(ctx)
	defer cancel0()
	proxied, _ := watchEvents(t, wctx0, h, "/api/v1/pods?watch=true&fieldSelector=spec.nodeName%3D"+harness.NodeName, kubeletUA)

	// The link goes black: a cached read is answered within --heartbeat-timeout-seconds + 1 s.
	if err := relay.BlackHole(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if got := podNames(t, kubelet, "", nodeSel); strings.Join(got, ",") != strings.Join(onlinePods, ",") {
		t.Fatalf("cached pod list %v, online it was %v", got, onlinePods)
	}
	// The design's figure is 1 s + 1 s (bench measures it); the bound leaves slack for a loaded
	// machine and is still short of a read left to hang on the black hole.
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("cached answer took %v on a black-holed link (want ≤ timeout 1 s + 1 s, ≤ 5 s on a loaded machine)", d)
	} else {
		t.Logf("black hole: cached pod list after %v", d.Round(time.Millisecond))
	}
	relay.Refuse()
	eventually(t, 60*time.Second, "hub knows it is offline", func() error {
		if v, _ := h.Metric(fmt.Sprintf(`nodehub_server_healthy{server="%s"}`, relay.Addr)); v != 0 {
			return fmt.Errorf("server still healthy")
		}
		return nil
	})
	for open := true; open; {
		select {
		case _, open = <-proxied:
		case <-time.After(10 * time.Second):
			t.Fatal("a watch proxied to the cloud stayed open after the hub went offline")
		}
	}

	t.Run("reads", func(t *testing.T) {
		if got := podNames(t, kubelet, "", nodeSel); strings.Join(got, ",") != strings.Join(onlinePods, ",") {
			t.Fatalf("offline kubelet pod list %v, online %v", got, onlinePods)
		}
		if got := podNames(t, kubelet, ns, labelSel); strings.Join(got, ",") != ns+"/off-a" {
			t.Fatalf("offline label-selector list: %v", got)
		}
		if n, err := kubelet.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{}); err != nil || n.Name != harness.NodeName {
			t.Fatalf("offline get node: %v", err)
		}
		svcs, err := proxy.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(svcs.Items) != 1 || svcs.Items[0].Name != "web" {
			t.Fatalf("offline kube-proxy service list: %v %v", err, svcs)
		}
		if _, err := kubelet.CoreV1().Pods(ns).Get(ctx, "never-was", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("offline get of an uncached pod: %v", err)
		}
		if _, err := kubelet.CoreV1().ConfigMaps("nowhere").List(ctx, metav1.ListOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("offline list never cached: want 404, got %v", err)
		}
		// Metadata-only lists, as controllers' metadata informers ask for them.
		req, _ := http.NewRequest(http.MethodGet, h.ProxyURL+"/api/v1/namespaces/"+ns+"/pods?labelSelector=tier%3Db", nil)
		req.Header.Set("Accept", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json")
		req.Header.Set("User-Agent", kubeletUA)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var pl metav1.PartialObjectMetadataList
		json.NewDecoder(resp.Body).Decode(&pl)
		resp.Body.Close()
		if pl.Kind != "PartialObjectMetadataList" || len(pl.Items) != 1 || pl.Items[0].Name != "off-b" || pl.Items[0].Labels["tier"] != "b" {
			t.Fatalf("offline PartialObjectMetadataList: %+v", pl)
		}
	})

	t.Run("writes", func(t *testing.T) {
		ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "off-a.offline", Namespace: ns},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "off-a"}, Reason: "Offline", Message: "cloud gone", Type: "Normal"}
		if _, err := kubelet.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			t.Fatalf("offline event create: %v", err)
		}
		patch := []byte(`{"status":{"conditions":[{"type":"OfflineTest","status":"True","reason":"Cut","message":"link cut"}]}}`)
		if _, err := kubelet.CoreV1().Nodes().Patch(ctx, harness.NodeName, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			t.Fatalf("offline node status patch: %v", err)
		}
		n, err := kubelet.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, c := range n.Status.Conditions {
			found = found || c.Type == "OfflineTest" && c.Status == "True"
		}
		if !found {
			t.Fatalf("patched node status not visible in the next get: %+v", n.Status.Conditions)
		}
		podPatch := []byte(`{"status":{"phase":"Running","podIP":"10.244.0.9"}}`)
		if _, err := kubelet.CoreV1().Pods(ns).Patch(ctx, "off-a", types.StrategicMergePatchType, podPatch, metav1.PatchOptions{}, "status"); err != nil {
			t.Fatalf("offline pod status patch: %v", err)
		}
		if p, err := kubelet.CoreV1().Pods(ns).Get(ctx, "off-a", metav1.GetOptions{}); err != nil || p.Status.PodIP != "10.244.0.9" {
			t.Fatalf("patched pod status not visible: %v", err)
		}
		if got := podNames(t, kubelet, "", metav1.ListOptions{FieldSelector: "spec.nodeName=" + harness.NodeName + ",status.phase=Running"}); strings.Join(got, ",") != ns+"/off-a" {
			t.Fatalf("field selector over the patched status: %v", got)
		}
		if err := kubelet.CoreV1().Pods(ns).Delete(ctx, "off-a", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("offline delete: want 403, got %v", err)
		}
		_, err = kubelet.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
		if !apierrors.IsServiceUnavailable(err) {
			t.Fatalf("offline configmap create: want 503, got %v", err)
		}
	})

	t.Run("kubectl", func(t *testing.T) {
		if out := kubectl(t, h, "get", "--raw", "/version"); !strings.Contains(out, "gitVersion") {
			t.Fatalf("kubectl get --raw /version offline: %s", out)
		}
		out := kubectl(t, h, "get", "pods,svc", "-o", "wide", "-n", ns)
		if !strings.Contains(out, "off-a") || !strings.Contains(out, "web") {
			t.Fatalf("kubectl get pods,svc offline:\n%s", out)
		}
		t.Logf("kubectl offline:\n%s", out)
	})

	t.Run("watch", func(t *testing.T) {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		evs, _ := watchEvents(t, wctx, h, "/api/v1/pods?watch=true&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&fieldSelector=spec.nodeName%3D"+harness.NodeName, kubeletUA)
		added, endMark, bookmarks := 0, false, 0
		deadline := time.After(12 * time.Second)
		for bookmarks < 2 {
			select {
			case ev, ok := <-evs:
				if !ok {
					t.Fatal("offline watch closed")
				}
				switch ev["type"] {
				case "ADDED":
					added++
				case "BOOKMARK":
					bookmarks++
					md, _ := ev["object"].(map[string]any)["metadata"].(map[string]any)
					if ann, _ := md["annotations"].(map[string]any); ann["k8s.io/initial-events-end"] == "true" {
						endMark = true
					}
				}
			case <-deadline:
				t.Fatalf("offline watch: %d ADDED, end mark %v, %d bookmarks", added, endMark, bookmarks)
			}
		}
		if added != len(onlinePods) || !endMark {
			t.Fatalf("initial events: %d ADDED (want %d), end mark %v", added, len(onlinePods), endMark)
		}
	})

	// A hub restarted while offline answers from the cache at once.
	dir := filepath.Dir(h.CacheDir)
	h.Stop()
	begin := time.Now()
	h2 := startHubIn(t, dir, relay.URL(), "--heartbeat-timeout-seconds=1")
	kubelet2 := h2.Client(kubeletUA, true)
	if got := podNames(t, kubelet2, "", nodeSel); strings.Join(got, ",") != strings.Join(onlinePods, ",") {
		t.Fatalf("restarted offline: %v", got)
	}
	t.Logf("restarted offline: cached pod list %v after exec", time.Since(begin).Round(time.Millisecond))

	// The cloud returns: the offline watch ends, and clients see what changed meanwhile.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	evs, _ := watchEvents(t, wctx, h2, "/api/v1/pods?watch=true&allowWatchBookmarks=true&fieldSelector=spec.nodeName%3D"+harness.NodeName, kubeletUA)
	if _, err := cluster.Admin.CoreV1().Pods(ns).Create(ctx, newPod(ns, "off-c"), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := relay.Pass(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	ended := false
	for !ended {
		select {
		case _, ok := <-evs:
			ended = !ok
		case <-time.After(8 * time.Second):
			t.Fatal("offline watch did not end when the cloud returned")
		}
	}
	t.Logf("offline watch ended %v after the link came back", time.Since(back).Round(time.Millisecond))
	eventually(t, 60*time.Second, "online again, with the pod created meanwhile", func() error {
		got := podNames(t, kubelet2, "", nodeSel)
		if !strings.Contains(strings.Join(got, ","), ns+"/off-c") {
			return fmt.Errorf("pods %v", got)
		}
		return nil
	})
}
