package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"nodehub/e2e/harness"
)

// The User-Agents of the node components whose informers informerSpecs plays (client-go 0.37,
// the e2e module's, as in Kubernetes v1.37).
const (
	informerKubeletUA = "kubelet/v1.37.2 (linux/amd64) kubernetes/e2e"
	informerProxyUA   = "kube-proxy/v1.37.2 (linux/amd64) kubernetes/e2e"
)

// informerSpec is one informer a node component runs: its own factory (the component's
// selectors) on a client with the component's User-Agent, through nodehub's proxy port.
type informerSpec struct {
	name     string // what the messages call it
	ua       string
	resource string // the resource the informer's requests name in their path
	empty    bool   // what it informs of may not exist (then it syncs with nothing)
	opts     []informers.SharedInformerOption
	informer func(informers.SharedInformerFactory) cache.SharedIndexInformer
}

// nodeInformers are informers of the kubelet and kube-proxy of Kubernetes v1.37 on node
// harness.NodeName: kubelet's per-object ConfigMap watches (its configmap manager: the
// kube-root-ca.crt every projected ServiceAccount volume mounts, and an optional volume's
// ConfigMap that does not exist), its pods, its Node, the Services (for the pods' environment),
// RuntimeClasses and CSIDrivers (none in this cluster, as in a plain one); kube-proxy's Services and
// EndpointSlices with its selectors, and its ServiceCIDRs. An informer of nothing must sync
// offline too: kubelet waits for each before it starts a pod.
func nodeInformers(ns string) []informerSpec {
	return []informerSpec{
		{name: "kubelet: configmap " + ns + "/kube-root-ca.crt", ua: informerKubeletUA, resource: "configmaps",
			opts: []informers.SharedInformerOption{informers.WithNamespace(ns), informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = "metadata.name=kube-root-ca.crt"
			})},
			informer: func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
				return f.Core().V1().ConfigMaps().Informer()
			}},
		{name: "kubelet: configmap " + ns + "/app-optional (an optional volume's, never created)", ua: informerKubeletUA, resource: "configmaps", empty: true,
			opts: []informers.SharedInformerOption{informers.WithNamespace(ns), informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = "metadata.name=app-optional"
			})},
			informer: func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
				return f.Core().V1().ConfigMaps().Informer()
			}},
		{name: "kubelet: pods on the node", ua: informerKubeletUA, resource: "pods",
			opts: []informers.SharedInformerOption{informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = "spec.nodeName=" + harness.NodeName
			})},
			informer: func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
				return f.Core().V1().Pods().Informer()
			}},
		{name: "kubelet: its node", ua: informerKubeletUA, resource: "nodes",
			opts: []informers.SharedInformerOption{informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = "metadata.name=" + harness.NodeName
			})},
			informer: func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
				return f.Core().V1().Nodes().Informer()
			}},
		{name: "kubelet: services", ua: informerKubeletUA, resource: "services",
			informer: func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
				return f.Core().V1().Services().Informer()
			}},
		{name: "kubelet: runtimeclasses", ua: informerKubeletUA, resource: "runtimeclasses", empty: true,
			informer: func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
				return f.Node().V1().RuntimeClasses().Informer()
			}},
		{name: "kubelet: csidrivers", ua: informerKubeletUA, resource: "csidrivers", empty: true,
			informer: func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
				return f.Storage().V1().CSIDrivers().Informer()
			}},
		{name: "kube-proxy: services", ua: informerProxyUA, resource: "services",
			opts: []informers.SharedInformerOption{informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.LabelSelector = "!service.kubernetes.io/service-proxy-name"
				o.FieldSelector = "spec.clusterIP!=None"
			})},
			informer: func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
				return f.Core().V1().Services().Informer()
			}},
		{name: "kube-proxy: endpointslices", ua: informerProxyUA, resource: "endpointslices",
			opts: []informers.SharedInformerOption{informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.LabelSelector = "!service.kubernetes.io/headless"
			})},
			informer: func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
				return f.Discovery().V1().EndpointSlices().Informer()
			}},
		{name: "kube-proxy: servicecidrs", ua: informerProxyUA, resource: "servicecidrs",
			informer: func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
				return f.Networking().V1().ServiceCIDRs().Informer()
			}},
	}
}

// seenRequest is one request an informer's client sent and the status it got.
type seenRequest struct {
	method string
	url    *url.URL
	status int
}

// requestLog records what a client sends (rest.Config.WrapTransport).
type requestLog struct {
	mu   sync.Mutex
	seen []seenRequest
}

func (l *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		s := seenRequest{method: r.Method, url: r.URL}
		if err == nil {
			s.status = resp.StatusCode
		}
		l.mu.Lock()
		l.seen = append(l.seen, s)
		l.mu.Unlock()
		return resp, err
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// watchListOnly returns nil when the client read resource only by watch-list
// (watch=true&sendInitialEvents=true, answered 200) and never by a LIST.
func (l *requestLog) watchListOnly(resource string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	watchLists := 0
	for _, s := range l.seen {
		if !strings.HasSuffix(s.url.Path, "/"+resource) {
			continue
		}
		q := s.url.Query()
		if q.Get("watch") != "true" && q.Get("watch") != "1" {
			return fmt.Errorf("a LIST: %s %s (%d)", s.method, s.url.RequestURI(), s.status)
		}
		if q.Get("sendInitialEvents") == "true" && s.status == http.StatusOK {
			watchLists++
		}
	}
	if watchLists == 0 {
		return fmt.Errorf("no watch-list of %s answered 200 among %d requests", resource, len(l.seen))
	}
	return nil
}

// runningInformer is one informer started on its own factory.
type runningInformer struct {
	spec    informerSpec
	log     *requestLog
	factory informers.SharedInformerFactory
	inf     cache.SharedIndexInformer
	stop    chan struct{}
}

func startInformer(h *harness.Hub, s informerSpec) *runningInformer {
	cfg := h.Config(s.ua, true)
	r := &runningInformer{spec: s, log: &requestLog{}, stop: make(chan struct{})}
	cfg.WrapTransport = r.log.wrap
	cs := kubernetes.NewForConfigOrDie(cfg)
	r.factory = informers.NewSharedInformerFactoryWithOptions(cs, 0, s.opts...)
	r.inf = s.informer(r.factory)
	r.factory.Start(r.stop)
	return r
}

// String lists the requests the informer's client sent.
func (l *requestLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, s := range l.seen {
		fmt.Fprintf(&b, "\n\t%s %s: %d", s.method, s.url.RequestURI(), s.status)
	}
	return b.String()
}

func (r *runningInformer) shutdown() {
	close(r.stop)
	r.factory.Shutdown()
}

// objects returns the informer's store as namespace/name -> uid@resourceVersion.
func (r *runningInformer) objects() map[string]string {
	m := map[string]string{}
	for _, o := range r.inf.GetStore().List() {
		a, err := meta.Accessor(o)
		if err != nil {
			continue
		}
		m[a.GetNamespace()+"/"+a.GetName()] = string(a.GetUID()) + "@" + a.GetResourceVersion()
	}
	return m
}

// startInformers starts every spec's informer and waits up to d for each to sync; it returns the
// informers and the names of those that did not sync.
func startInformers(h *harness.Hub, specs []informerSpec, d time.Duration) ([]*runningInformer, []string) {
	var running []*runningInformer
	for _, s := range specs {
		running = append(running, startInformer(h, s))
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var unsynced []string
	for _, r := range running {
		if !cache.WaitForCacheSync(ctx.Done(), r.inf.HasSynced) {
			unsynced = append(unsynced, r.spec.name)
		}
	}
	return running, unsynced
}

// Informers of client-go >= 1.35 (WatchListClient on: a watch with sendInitialEvents=true instead
// of a LIST) as Kubernetes v1.37's kubelet and kube-proxy run them, through nodehub: synced
// online, the link black-holed, the informers started anew (a new factory: the component
// restarted) sync every resource they synced online, with the same objects. On each release's
// control plane (TestInformersWatchListOffline/v1.34, /v1.37).
func TestInformersWatchListOffline(t *testing.T) { eachRelease(t, informersWatchListOffline) }

func informersWatchListOffline(t *testing.T, c *harness.Cluster) {
	if !clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient) {
		t.Fatalf("client-go's WatchListClient feature is off (KUBE_FEATURE_WatchListClient in the environment?): this test is about informers that use watch-list")
	}
	ctx := context.Background()
	ns := "informer-e2e"
	if err := c.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	// What the informers read: kube-root-ca.crt (as kube-controller-manager publishes it) and a pod
	// on the node that mounts it and an optional ConfigMap that does not exist (the node may read a
	// ConfigMap only for a pod of its own), a Service and its EndpointSlice; the apiserver made the
	// default ServiceCIDR. No RuntimeClass, no CSIDriver.
	ca := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kube-root-ca.crt"}, Data: map[string]string{"ca.crt": "e2e"}}
	if _, err := c.Admin.CoreV1().ConfigMaps(ns).Create(ctx, ca, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod := newPod(ns, "informed")
	pod.Spec.Volumes = []corev1.Volume{{Name: "ca", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}}}},
		{Name: "optional", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "app-optional"}, Optional: ptr(true)}}}}
	if _, err := c.Admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	makeServiceOn(t, ctx, c, ns, "informed") // a Service and its EndpointSlice for kube-proxy
	// kube-proxy runs as the node here (nodehub lends it the node's identity).
	if err := c.BindNodeProxier(ctx, harness.NodeName); err != nil {
		t.Fatal(err)
	}

	relay, err := harness.NewRelay(strings.TrimPrefix(c.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	h := startHubOn(t, c, t.TempDir(), relay.URL(), "--heartbeat-timeout-seconds=1")
	specs := nodeInformers(ns)

	online, unsynced := startInformers(h, specs, 60*time.Second)
	if len(unsynced) > 0 {
		t.Fatalf("online, not synced within 60 s: %s", strings.Join(unsynced, ", "))
	}
	want := map[string]map[string]string{}
	for _, r := range online {
		if err := r.log.watchListOnly(r.spec.resource); err != nil {
			t.Errorf("%s online did not read by watch-list: %v", r.spec.name, err)
		}
		want[r.spec.name] = r.objects()
		if len(want[r.spec.name]) == 0 && !r.spec.empty {
			t.Errorf("%s online: nothing synced", r.spec.name)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	cacheWritten(t, h)
	sent := map[string]*requestLog{}
	for _, r := range online {
		want[r.spec.name] = r.objects() // as the hub last passed them on
		sent[r.spec.name] = r.log
		r.shutdown()
	}

	blackHole(t, h, relay)
	start := time.Now()
	offline, unsynced := startInformers(h, specs, 30*time.Second)
	defer func() {
		for _, r := range offline {
			r.shutdown()
		}
	}()
	t.Logf("offline: %d informers started anew, %d synced within %v", len(offline), len(offline)-len(unsynced), time.Since(start).Round(time.Millisecond))
	for _, r := range offline {
		if slices.Contains(unsynced, r.spec.name) {
			t.Errorf("%s restarted offline: not synced within 30 s (online it synced %d objects); online it sent:%v\noffline:%v", r.spec.name, len(want[r.spec.name]), sent[r.spec.name], r.log)
			continue
		}
		if got := r.objects(); !maps.Equal(got, want[r.spec.name]) {
			t.Errorf("%s restarted offline synced %v, online it had %v", r.spec.name, got, want[r.spec.name])
		}
	}
}
