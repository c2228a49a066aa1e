package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"nodehub/e2e/harness"
)

// The Autonomy condition follows the node with each release's own kubelet (kubemark's hollow
// kubelet through nodehub): v1.37's reads its node from its informer (a watch-list of its node),
// never with a GET every 10 s, and the condition still follows the annotation. Set, removed and
// set again, the cloud's node carries the right condition within 5 s each time; with the link
// black-holed, kubelet's reads of its node (a GET, a watch-list) carry it from the cache.
func TestAutonomyFollowsTheNode(t *testing.T) { eachRelease(t, autonomyFollowsTheNode) }

func autonomyFollowsTheNode(t *testing.T, c *harness.Cluster) {
	ctx := context.Background()
	const node = "hollow-autonomy"
	cert, key, err := c.NodeCredentials(node)
	if err != nil {
		t.Fatal(err)
	}
	relay, err := harness.NewRelay(strings.TrimPrefix(c.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	hub := startHubOn(t, c, t.TempDir(), relay.URL(), "--node-name="+node, "--client-cert="+cert, "--client-key="+key, "--heartbeat-timeout-seconds=1")
	hn, err := c.StartHollowNode(ctx, harness.HollowOptions{Name: node, Dir: t.TempDir(), Server: hub.ProxyURL})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		hn.Stop()
		if t.Failed() {
			t.Logf("kubemark kubelet log (tail):\n%s", tailString(withoutNoise(hn.Kubelet.Log()), 6000))
		}
		_ = c.Admin.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{})
	}()
	inCloud := func(what string, d time.Duration, status corev1.ConditionStatus) {
		t.Helper()
		start := time.Now()
		eventually(t, d, what+": the cloud's node", func() error {
			n, err := c.Admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if cond := autonomyOf(n); cond == nil || cond.Status != status {
				return errorf("condition %+v, want %s", cond, status)
			}
			return nil
		})
		t.Logf("%s: %s in the cloud after %v", what, status, time.Since(start).Round(time.Millisecond))
	}
	annotate := func(value string) {
		t.Helper()
		patch := `{"metadata":{"annotations":{"node.beta.openyurt.io/autonomy":null}}}`
		if value != "" {
			patch = `{"metadata":{"annotations":{"node.beta.openyurt.io/autonomy":"` + value + `"}}}`
		}
		if _, err := c.Admin.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The kubelet registers its node; the hub sees it and writes the condition False.
	inCloud("registered", 2*time.Minute, corev1.ConditionFalse)
	annotate("true")
	inCloud("annotated", 5*time.Second, corev1.ConditionTrue)
	annotate("")
	inCloud("annotation removed", 5*time.Second, corev1.ConditionFalse)
	annotate("true")
	inCloud("annotated again", 5*time.Second, corev1.ConditionTrue)

	// Offline: kubelet's reads of its node, from the cache, carry the condition.
	kubelet := hub.Client(c.UserAgent("kubelet"), true)
	eventually(t, 30*time.Second, "kubelet's watch-list of its node online", func() error { return watchListCarries(ctx, kubelet, node) })
	cacheWritten(t, hub)
	blackHole(t, hub, relay)
	n, err := kubelet.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cond := autonomyOf(n); cond == nil || cond.Status != corev1.ConditionTrue {
		t.Fatalf("offline: kubelet's GET of its node: condition %+v, want True", cond)
	}
	if err := watchListCarries(ctx, kubelet, node); err != nil {
		t.Fatalf("offline: kubelet's watch-list of its node: %v", err)
	}
}

// watchListCarries reads node by a watch-list as kubelet's informer does and checks that the node
// carries the condition True.
func watchListCarries(ctx context.Context, cl *kubernetes.Clientset, node string) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	w, err := cl.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + node, SendInitialEvents: ptr(true),
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true})
	if err != nil {
		return err
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		n, ok := ev.Object.(*corev1.Node)
		if ev.Type != watch.Added || !ok {
			return errorf("a %s event (%T) before the node", ev.Type, ev.Object)
		}
		if cond := autonomyOf(n); cond == nil || cond.Status != corev1.ConditionTrue {
			return errorf("condition %+v, want True", cond)
		}
		return nil
	}
	return errorf("the watch-list ended without the node")
}
