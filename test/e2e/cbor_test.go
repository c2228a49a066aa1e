package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/watch"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"nodehub/e2e/harness"
)

// cborGates are client-go's feature gates with ClientsAllowCBOR and ClientsPreferCBOR on, what
// KUBE_FEATURE_ClientsAllowCBOR=true and KUBE_FEATURE_ClientsPreferCBOR=true in a client's
// environment turn on.
type cborGates struct{ clientfeatures.Gates }

func (g cborGates) Enabled(f clientfeatures.Feature) bool {
	return f == clientfeatures.ClientsAllowCBOR || f == clientfeatures.ClientsPreferCBOR || g.Gates.Enabled(f)
}

// preferCBOR turns client-go's CBOR gates on for the clients the test makes, until it ends (no
// other test runs meanwhile: the e2e tests that change process state are not parallel).
func preferCBOR(t *testing.T) {
	prev := clientfeatures.FeatureGates()
	clientfeatures.ReplaceFeatureGates(cborGates{prev})
	t.Cleanup(func() { clientfeatures.ReplaceFeatureGates(prev) })
}

// wireLog records what a client asked for and what it got.
type wireLog struct {
	mu   sync.Mutex
	seen []string // "GET <uri> accept=<Accept> -> <status> <Content-Type>"
}

func (l *wireLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		s := fmt.Sprintf("%s %s accept=%q ->", r.Method, r.URL.RequestURI(), r.Header.Get("Accept"))
		if err == nil {
			s += fmt.Sprintf(" %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		l.mu.Lock()
		l.seen = append(l.seen, s)
		l.mu.Unlock()
		return resp, err
	})
}

func (l *wireLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.seen
	l.seen = nil
	return s
}

// cborClient is client-go preferring CBOR (no content type of its own: it asks
// "application/cbor, */*" and sends CBOR), or taking CBOR alone.
func cborClient(host, ua string, only bool, cfg *rest.Config) (*kubernetes.Clientset, *wireLog) {
	l := &wireLog{}
	if cfg == nil {
		cfg = &rest.Config{Host: host, QPS: 1000, Burst: 1000}
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = ua
	// The typed clients ask protobuf unless told: a client opting into CBOR names it (and so
	// sends "Accept: application/cbor, */*").
	cfg.ContentType, cfg.AcceptContentTypes = "application/cbor", ""
	if only {
		cfg.AcceptContentTypes = "application/cbor"
	}
	cfg.WrapTransport = l.wrap
	return kubernetes.NewForConfigOrDie(cfg), l
}

const cborUA = "cbor-e2e/v1.37.2 (linux/amd64) kubernetes/e2e"

// The next wire formats, on an apiserver that serves CBOR (CBORServingAndStorage) and shards
// lists (ShardedListAndWatch, v1.37): a client-go client preferring CBOR works through the hub
// online and offline — LIST, GET, WATCH and its informer's watch-list — answered in JSON, which it
// accepts, so that the filters read it and the cache keeps it; a client taking CBOR alone gets the
// cloud's CBOR online and 406 offline, never another encoding; a list of one shard is answered
// online and is never kept as the whole list: offline the whole list is what was listed whole,
// and a shard's list is refused. Each release on a control plane of its own with those gates.
func TestCBORAndShardsThroughTheHub(t *testing.T) {
	for _, r := range harness.Releases() {
		t.Run(r.Name, func(t *testing.T) {
			gates := "CBORServingAndStorage=true"
			if r.Name != "v1.34" {
				gates += ",ShardedListAndWatch=true" // alpha since v1.36
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			dir := filepath.Join(t.TempDir(), "cluster")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			c, err := harness.StartClusterWithArgs(ctx, r, dir, 1, "--feature-gates="+gates)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Stop()
			cborAndShards(t, c, r.Name != "v1.34")
		})
	}
}

func cborAndShards(t *testing.T, c *harness.Cluster, shards bool) {
	ctx := context.Background()
	ns := "cbor"
	if err := c.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	var uids []string
	for i := 0; i < 4; i++ {
		svc, err := c.Admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s" + strconv.Itoa(i)},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids = append(uids, string(svc.UID))
	}
	if err := c.BindNodeProxier(ctx, harness.NodeName); err != nil { // the node may read services
		t.Fatal(err)
	}
	preferCBOR(t)

	// The apiserver itself answers this client CBOR: the gates are on.
	direct, dl := cborClient("", cborUA, false, c.AdminConfig)
	if _, err := direct.CoreV1().Services(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if seen := dl.take(); len(seen) != 1 || !strings.HasSuffix(seen[0], "-> 200 application/cbor") {
		t.Fatalf("the apiserver did not answer CBOR: %v", seen)
	}

	relay, err := harness.NewRelay(strings.TrimPrefix(c.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	h := startHubOn(t, c, t.TempDir(), relay.URL(), "--heartbeat-timeout-seconds=1", "--cache-agents=*")
	prefer, pl := cborClient(h.ProxyURL, cborUA, false, nil)
	only, ol := cborClient(h.ProxyURL, cborUA, true, nil)

	list, err := prefer.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 4 {
		t.Fatalf("online list: %v %d items", err, len(list.Items))
	}
	if _, err := prefer.CoreV1().Services(ns).Get(ctx, "s0", metav1.GetOptions{}); err != nil {
		t.Fatalf("online get: %v", err)
	}
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	wi, err := prefer.CoreV1().Services(ns).Watch(wctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatalf("online watch: %v", err)
	}
	if _, err := c.Admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s4"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAdded(t, wi, "s4")
	wi.Stop()
	wcancel()
	online := servicesInformer(t, prefer, ns, 30*time.Second)
	want := online.names()
	online.stop()
	if len(want) != 5 {
		t.Fatalf("online informer synced %v", want)
	}
	jsonOnly(t, "online, preferring CBOR", pl.take())
	if _, err := only.CoreV1().Services(ns).Get(ctx, "s0", metav1.GetOptions{}); err != nil {
		t.Fatalf("online get taking CBOR alone: %v", err)
	}
	if seen := ol.take(); len(seen) != 1 || !strings.HasSuffix(seen[0], "-> 200 application/cbor") {
		t.Fatalf("online, CBOR alone: %v, want the cloud's CBOR", seen)
	}
	shard := url.Values{"shardSelector": {shardOf(uids[0])}}
	if shards {
		if code, body := rawList(t, h, "/api/v1/namespaces/"+ns+"/services", shard); code != http.StatusOK || !strings.Contains(body, `"name":"s0"`) || strings.Contains(body, `"name":"s1"`) {
			t.Fatalf("online, one shard: %d %s", code, body)
		}
	}
	cacheWritten(t, h)

	blackHole(t, h, relay)
	if list, err := prefer.CoreV1().Services(ns).List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 5 {
		t.Fatalf("offline list: %v %d items, want the 5 listed whole", err, len(list.Items))
	}
	if _, err := prefer.CoreV1().Services(ns).Get(ctx, "s0", metav1.GetOptions{}); err != nil {
		t.Fatalf("offline get: %v", err)
	}
	offline := servicesInformer(t, prefer, ns, 30*time.Second)
	got := offline.names()
	offline.stop()
	if !slices.Equal(got, want) {
		t.Fatalf("offline informer synced %v, online %v", got, want)
	}
	jsonOnly(t, "offline, preferring CBOR", pl.take())
	if _, err := only.CoreV1().Services(ns).Get(ctx, "s0", metav1.GetOptions{}); !apierrors.IsNotAcceptable(err) {
		t.Fatalf("offline get taking CBOR alone: %v, want 406; sent %v", err, ol.take())
	}
	if shards {
		if code, body := rawList(t, h, "/api/v1/namespaces/"+ns+"/services", shard); code != http.StatusServiceUnavailable {
			t.Fatalf("offline, one shard: %d %s, want 503", code, body)
		}
	}
}

// shardOf is a shard selector of the one hash value of uid.
func shardOf(uid string) string {
	v, err := strconv.ParseUint(sharding.HashField(uid), 16, 64)
	if err != nil {
		panic(err)
	}
	return fmt.Sprintf("shardRange(object.metadata.uid, '0x%016x', '0x%016x')", v, v+1)
}

// jsonOnly fails unless every request asked for CBOR first and got JSON (never a cached answer in
// an encoding the client did not ask for).
func jsonOnly(t *testing.T, what string, seen []string) {
	t.Helper()
	if len(seen) == 0 {
		t.Fatalf("%s: no request", what)
	}
	for _, s := range seen {
		if !strings.Contains(s, `accept="application/cbor`) || !strings.Contains(s, "application/json") {
			t.Fatalf("%s: %s; all:\n%s", what, s, strings.Join(seen, "\n"))
		}
	}
}

func waitAdded(t *testing.T, wi watch.Interface, name string) {
	t.Helper()
	for ev := range wi.ResultChan() {
		if s, ok := ev.Object.(*corev1.Service); ok && ev.Type == watch.Added && s.Name == name {
			return
		}
	}
	t.Fatalf("the watch ended before %s was ADDED", name)
}

type svcInformer struct {
	f    informers.SharedInformerFactory
	inf  cache.SharedIndexInformer
	done chan struct{}
}

// servicesInformer starts an informer of ns's services (a watch-list) and waits until it synced.
func servicesInformer(t *testing.T, cs kubernetes.Interface, ns string, d time.Duration) *svcInformer {
	t.Helper()
	s := &svcInformer{f: informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns)), done: make(chan struct{})}
	s.inf = s.f.Core().V1().Services().Informer()
	s.f.Start(s.done)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), s.inf.HasSynced) {
		s.stop()
		t.Fatalf("the services informer did not sync within %v", d)
	}
	return s
}

func (s *svcInformer) names() []string {
	var out []string
	for _, o := range s.inf.GetStore().List() {
		out = append(out, o.(*corev1.Service).Name)
	}
	slices.Sort(out)
	return out
}

func (s *svcInformer) stop() {
	close(s.done)
	s.f.Shutdown()
}

// rawList lists path with query q through the hub's proxy port as the CBOR test's client, in JSON.
func rawList(t *testing.T, h *harness.Hub, path string, q url.Values) (int, string) {
	t.Helper()
	return rawGetAs(t, h, cborUA, path+"?"+q.Encode())
}
