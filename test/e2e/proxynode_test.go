package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"nodehub/e2e/harness"
)

// nodeWatcher plays kube-proxy 1.37's NodeManager (kubernetes#138183): an informer of its own Node
// (metadata.name=<node>) that exits the process when the Node is deleted — a DELETED event, or a
// re-list without it — or when its node IPs change. The hollow kube-proxy of kubemark has no
// NodeManager ("hollow-proxy doesn't need node config"), so the test watches the hub's answers
// with the same informer and records every exit kube-proxy would have taken.
type nodeWatcher struct {
	url     string // the hub's proxy port it talks to
	log     *requestLog
	factory informers.SharedInformerFactory
	stop    chan struct{}

	mu    sync.Mutex
	ips   []string // the node IPs of its first sight
	exits []string // why kube-proxy would have exited
}

func nodeIPs(n *corev1.Node) []string {
	var ips []string
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
			ips = append(ips, a.Address)
		}
	}
	return ips
}

func watchOwnNode(proxyURL string) *nodeWatcher {
	w := &nodeWatcher{url: proxyURL, log: &requestLog{}, stop: make(chan struct{})}
	cfg := (&harness.Hub{ProxyURL: proxyURL}).Config(informerProxyUA, true)
	cfg.WrapTransport = w.log.wrap
	w.factory = informers.NewSharedInformerFactoryWithOptions(kubernetes.NewForConfigOrDie(cfg), 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + harness.NodeName }))
	inf := w.factory.Core().V1().Nodes().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { w.saw(obj.(*corev1.Node), "added") },
		UpdateFunc: func(_, obj any) {
			w.saw(obj.(*corev1.Node), "updated")
		},
		DeleteFunc: func(obj any) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.exits = append(w.exits, fmt.Sprintf("Node is being deleted (%T)", obj))
		},
	})
	w.factory.Start(w.stop)
	return w
}

func (w *nodeWatcher) saw(n *corev1.Node, how string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ips := nodeIPs(n)
	if w.ips == nil {
		w.ips = ips
		return
	}
	if !slices.Equal(ips, w.ips) {
		w.exits = append(w.exits, fmt.Sprintf("NodeIPs changed (%s): %v, first %v", how, ips, w.ips))
	}
}

func (w *nodeWatcher) shutdown() {
	close(w.stop)
	w.factory.Shutdown()
}

// requests returns how many requests the watcher sent so far.
func (w *nodeWatcher) requests() int {
	w.log.mu.Lock()
	defer w.log.mu.Unlock()
	return len(w.log.seen)
}

// waitRequest waits until a request sent after the first `since` got an answer ok says is the one.
func (w *nodeWatcher) waitRequest(t *testing.T, since int, what string, ok func(seenRequest) bool) {
	t.Helper()
	eventually(t, 90*time.Second, what, func() error {
		w.log.mu.Lock()
		seen := slices.Clone(w.log.seen)
		w.log.mu.Unlock()
		for _, s := range seen[min(since, len(seen)):] {
			if ok(s) {
				return nil
			}
		}
		return errorf("none of the requests since the %dth:%v", since, w.log)
	})
}

// watching: a watch answered 200 (a watch-list, or a watch resumed from the last resourceVersion,
// which the reflector sends after its watch ended).
func watching(s seenRequest) bool {
	return s.url.Query().Get("watch") == "true" && s.status == http.StatusOK
}

// answered: any answer (the hub without a cache refuses a watch-list or a list: 404, never cached).
func answered(s seenRequest) bool { return s.status != 0 }

// restartSees plays kube-proxy restarted: a new node informer through proxyURL that must sync
// with its node, at the IPs it had.
func restartSees(t *testing.T, proxyURL string, ips []string, what string) {
	t.Helper()
	w := watchOwnNode(proxyURL)
	defer w.shutdown()
	eventually(t, 60*time.Second, what+": a restarted kube-proxy's node informer sees its node", func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.ips == nil {
			return errorf("not yet")
		}
		if !slices.Equal(w.ips, ips) || len(w.exits) > 0 {
			t.Fatalf("%s: a restarted kube-proxy saw IPs %v (want %v), exits %v", what, w.ips, ips, w.exits)
		}
		return nil
	})
}

// ensureNodeWithIP makes the node (its kubelet does not run here) with an InternalIP, if it has none.
func ensureNodeWithIP(t *testing.T, ctx context.Context, c *harness.Cluster) {
	t.Helper()
	n, err := c.Admin.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		n, err = c.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: harness.NodeName}}, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(nodeIPs(n)) > 0 {
		return
	}
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.9.0.1"})
	if _, err := c.Admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// kube-proxy 1.37 exits when its Node is deleted or its node IPs change (kubernetes#138183): no
// answer of the hub may show it either. Its Node informer, through the hub, through an outage
// (its watch ended, a watch-list answered from the cache), an offline restart of the hub, a
// hub restarted offline with its cache dropped (its list refused, never answered empty), and the cloud's
// return (a watch-list from the cloud): it never sees its Node go or its IPs change.
// v1.37 only: kube-proxy watches its Node this way since v1.37.
func TestKubeProxyNeverSeesItsNodeGo(t *testing.T) {
	t.Run("v1.34", func(t *testing.T) {
		t.Skip("kube-proxy exits on its Node's deletion or new IPs only since v1.37")
	})
	r, err := harness.ReleaseNamed("v1.37")
	if err != nil {
		t.Fatal(err)
	}
	t.Run(r.Name, func(t *testing.T) { kubeProxyNeverSeesItsNodeGo(t, clusterAt(t, r)) })
}

func kubeProxyNeverSeesItsNodeGo(t *testing.T, c *harness.Cluster) {
	ctx := context.Background()
	ensureNodeWithIP(t, ctx, c)
	if err := c.BindNodeProxier(ctx, harness.NodeName); err != nil {
		t.Fatal(err)
	}
	relay, err := harness.NewRelay(strings.TrimPrefix(c.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	dir := t.TempDir()
	h := startHubOn(t, c, dir, relay.URL(), "--heartbeat-timeout-seconds=1")
	port := "--proxy-port=" + strconv.Itoa(h.ProxyPort) // every hub of the test: kube-proxy's server
	w := watchOwnNode(h.ProxyURL)
	defer w.shutdown()
	w.waitRequest(t, 0, "online, the node informer's watch-list", watching)
	var ips []string
	eventually(t, 30*time.Second, "online, the node informer sees its node", func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if ips = w.ips; ips == nil {
			return errorf("not yet")
		}
		return nil
	})
	cacheWritten(t, h)

	since := w.requests()
	blackHole(t, h, relay)
	w.waitRequest(t, since, "offline, its watch again", watching)
	restartSees(t, h.ProxyURL, ips, "offline")

	since = w.requests()
	h.Stop()
	h = startHubOn(t, c, dir, relay.URL(), "--heartbeat-timeout-seconds=1", port)
	w.waitRequest(t, since, "after the hub's offline restart, its watch again", watching)
	restartSees(t, w.url, ips, "after the hub's offline restart")

	// The cache dropped (the flash wiped) and the hub restarted, offline: nothing to answer from.
	since = w.requests()
	h.Stop()
	if err := os.RemoveAll(h.CacheDir); err != nil {
		t.Fatal(err)
	}
	h = startHubNoCache(t, c, dir, relay.URL(), port)
	w.waitRequest(t, since, "without a cache, offline, an answer", answered)

	since = w.requests()
	if err := relay.Pass(); err != nil {
		t.Fatal(err)
	}
	w.waitRequest(t, since, "the cloud back, its watch from the cloud", watching)
	restartSees(t, w.url, ips, "the cloud back")

	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ips == nil {
		t.Fatalf("the node informer never saw its node; it sent:%v", w.log)
	}
	if len(w.exits) > 0 {
		t.Fatalf("kube-proxy 1.37 would have exited: %s; it sent:%v", strings.Join(w.exits, "; "), w.log)
	}
	t.Logf("the node informer sent:%v", w.log)
}

// startHubNoCache starts a hub that cannot get ready (offline, nothing cached) and waits for its
// healthz only; it is stopped when the test ends.
func startHubNoCache(t *testing.T, c *harness.Cluster, dir, servers string, args ...string) *harness.Hub {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := c.StartHub(ctx, harness.HubOptions{Bin: nodehub, Dir: dir, Servers: servers, Args: append([]string{"--heartbeat-timeout-seconds=1"}, args...)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Stop()
		if t.Failed() {
			t.Logf("nodehub log:\n%s", tailString(h.Log(), 6000))
		}
	})
	return h
}
