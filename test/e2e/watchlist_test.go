package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	nodev1 "k8s.io/api/node/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/cache"
	"nodehub/e2e/harness"
	"nodehub/wire"
)

// What client-go ≥ 1.35 clients send: every informer lists by watch-list (KEP-3157, the
// WatchListClient feature, on by default since 1.35).
const (
	kubelet137UA   = "kubelet/v1.37.2 (linux/amd64) kubernetes/e2e"
	kubeProxy137UA = "kube-proxy/v1.37.2 (linux/amd64) kubernetes/e2e"
	coredns137UA   = "coredns/v1.15.0 (linux/amd64) kubernetes/e2e"
	// The Accept headers of kubelet and kube-proxy (protobuf) and of a JSON client.
	acceptProtobuf = "application/vnd.kubernetes.protobuf,application/json"
	acceptJSON     = "application/json, */*"
)

// wlClient sends requests shaped as client-go 1.37's.
type wlClient struct {
	ua, accept, base, token string
	http                    *http.Client
}

// wlAnswer is a watch-list's initial events or a list, as a client read them.
type wlAnswer struct {
	code  int
	ct    string
	names []string // namespace/name, in the order sent
	rv    string   // the initial-events-end bookmark's, or the list's
	ended bool     // a watch-list's initial events ended with the bookmark
	body  string   // an error answer
}

func (c wlClient) get(t *testing.T, ctx context.Context, path string, q url.Values) *http.Response {
	t.Helper()
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	req.Header.Set("User-Agent", c.ua)
	req.Header.Set("Accept", c.accept)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", c.ua, u, err)
	}
	return resp
}

// watchList sends the reflector's watch-list (ListOptions{SendInitialEvents: true,
// ResourceVersionMatch: NotOlderThan, AllowWatchBookmarks: true, TimeoutSeconds, ResourceVersion:
// rv} with the selectors) and reads its initial events up to the initial-events-end bookmark.
func (c wlClient) watchList(t *testing.T, path, ls, fs, rv string) wlAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q := url.Values{"watch": {"true"}, "sendInitialEvents": {"true"}, "resourceVersionMatch": {"NotOlderThan"},
		"allowWatchBookmarks": {"true"}, "timeoutSeconds": {"347"}}
	if ls != "" {
		q.Set("labelSelector", ls)
	}
	if fs != "" {
		q.Set("fieldSelector", fs)
	}
	if rv != "" {
		q.Set("resourceVersion", rv)
	}
	resp := c.get(t, ctx, path, q)
	defer resp.Body.Close()
	if c.token != "" && resp.ProtoMajor != 2 {
		t.Fatalf("%s watch-list %s over %s, want HTTP/2 as client-go on TLS", c.ua, path, resp.Proto)
	}
	a := wlAnswer{code: resp.StatusCode, ct: resp.Header.Get("Content-Type")}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		a.body = string(b)
		return a
	}
	end := errors.New("initial events ended")
	sp := wire.NewWatchSplitter(wire.ParseMediaType(a.ct), func(ev wire.WatchEvent) error {
		m, err := wire.ExtractMeta(ev.Object, "")
		if err != nil {
			return err
		}
		switch ev.Type {
		case wire.EventAdded:
			a.names = append(a.names, m.Namespace+"/"+m.Name)
		case wire.EventBookmark:
			if wire.EndsInitialEvents(ev.Object) {
				a.rv, a.ended = m.ResourceVersion, true
				return end
			}
		default:
			return fmt.Errorf("a %s event among the initial events", ev.Type)
		}
		return nil
	})
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := sp.Write(buf[:n]); errors.Is(werr, end) {
				return a
			} else if werr != nil {
				t.Fatalf("%s watch-list %s: %v", c.ua, path, werr)
			}
		}
		if err != nil {
			return a // ended before the bookmark: a.ended says so
		}
	}
}

// list sends a LIST (the reflector's fallback) and reads its items.
func (c wlClient) list(t *testing.T, path, ls, fs string) wlAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q := url.Values{"resourceVersion": {"0"}}
	if ls != "" {
		q.Set("labelSelector", ls)
	}
	if fs != "" {
		q.Set("fieldSelector", fs)
	}
	resp := c.get(t, ctx, path, q)
	defer resp.Body.Close()
	a := wlAnswer{code: resp.StatusCode, ct: resp.Header.Get("Content-Type")}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s list %s: %v", c.ua, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		a.body = string(body)
		return a
	}
	sp := wire.NewListSplitter(wire.ParseMediaType(a.ct), wire.ListHandler{
		Meta: func(m wire.ListMeta) { a.rv = m.ResourceVersion },
		Item: func(raw []byte) error {
			m, err := wire.ExtractMeta(raw, "")
			a.names = append(a.names, m.Namespace+"/"+m.Name)
			return err
		},
	})
	if _, err := sp.Write(body); err != nil {
		t.Fatalf("%s list %s: %v", c.ua, path, err)
	}
	if err := sp.Close(); err != nil {
		t.Fatalf("%s list %s: %v", c.ua, path, err)
	}
	if !wire.ParseMediaType(a.ct).IsProtobuf() {
		// The offline proxy writes a JSON list's metadata after its items (the resourceVersion is
		// known once they are read); the splitter reports only metadata that comes first.
		var l struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(body, &l); err != nil {
			t.Fatalf("%s list %s: %v", c.ua, path, err)
		}
		a.rv = l.Metadata.ResourceVersion
	}
	return a
}

// wlCase is one informer of a node client: its client, resource path and selectors, and what its
// cache is kept as (owner; the pool's shared store answers the node's clients' pool-scope reads
// online, and its own copy, as the hub's, answers them offline).
type wlCase struct {
	name   string
	c      wlClient
	path   string
	ls, fs string
	res    cache.Resource
	ns     string
	pool   bool
	want   []string // objects the online answer must hold
	absent []string // and must not
}

// The acceptance test of issue 20: the watch-lists of kubelet, kube-proxy and a ServiceAccount
// client (CoreDNS's informers) through the hub to the real kube-apiserver (v1.34: it serves
// watch-lists), link black-holed, then the same watch-lists and their fallback LISTs answered
// offline, complete: the same objects, the same resourceVersion.
func TestWatchListOffline(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	startControllerManager(t, 0)
	go cluster.ApproveServingCSRs(ctx)
	ns := "watchlist"
	if err := cluster.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	bindNodes(t, "e2e-watchlist-node", rbacv1.PolicyRule{APIGroups: []string{"", "discovery.k8s.io", "node.k8s.io", "storage.k8s.io"},
		Resources: []string{"configmaps", "pods", "services", "endpointslices", "runtimeclasses", "csidrivers", "volumeattachments"}, Verbs: []string{"get", "list", "watch"}})
	token := corednsToken(t, ctx, ns)
	mustCreate := func(err error) {
		t.Helper()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	_, err := cluster.Admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "wl-cm"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	mustCreate(err)
	_, err = cluster.Admin.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "wl-rc"}, Handler: "runc"}, metav1.CreateOptions{})
	mustCreate(err)
	for _, n := range []string{"wl-a", "wl-b"} {
		_, err := cluster.Admin.CoreV1().Pods(ns).Create(ctx, newPod(ns, n), metav1.CreateOptions{})
		mustCreate(err)
		deleteAtEnd(t, ns, n)
	}
	if _, err := cluster.Admin.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{}); apierrors.IsNotFound(err) {
		makeService(t, ctx, ns, "web")
	}
	headless := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "hl"}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Port: 53}}}}
	_, err = cluster.Admin.CoreV1().Services(ns).Create(ctx, headless, metav1.CreateOptions{})
	mustCreate(err)
	_, err = cluster.Admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "hl-abc", Labels: map[string]string{discoveryv1.LabelServiceName: "hl", corev1.IsHeadlessService: ""}},
		AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.1.2.4"}}},
	}, metav1.CreateOptions{})
	mustCreate(err)
	// What kube-controller-manager's root-ca-cert-publisher makes in every namespace (the harness
	// runs only the controllers its tests need).
	_, err = cluster.Admin.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt"},
		Data: map[string]string{"ca.crt": string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cluster.PKI.CA.Raw}))}}, metav1.CreateOptions{})
	mustCreate(err)

	relay, err := harness.NewRelay(strings.TrimPrefix(cluster.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Refuse()
	h := startHubServers(t, relay.URL(), "--heartbeat-timeout-seconds=1")
	waitServing(t, h)
	pool := x509.NewCertPool()
	pool.AddCert(cluster.PKI.CA)
	secure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}} // HTTP/2, as client-go
	defer secure.CloseIdleConnections()
	kubelet := wlClient{ua: kubelet137UA, accept: acceptProtobuf, base: h.ProxyURL, http: http.DefaultClient}
	proxy := wlClient{ua: kubeProxy137UA, accept: acceptProtobuf, base: h.ProxyURL, http: http.DefaultClient}
	coredns := wlClient{ua: coredns137UA, accept: acceptJSON, base: h.SecureURL, token: token, http: secure}

	res := func(owner, group, resource string) cache.Resource {
		return cache.Resource{Owner: owner, Group: group, Version: "v1", Resource: resource}
	}
	cases := []wlCase{
		{name: "kubelet's kube-root-ca.crt by name", c: kubelet, path: "/api/v1/namespaces/default/configmaps", fs: "metadata.name=kube-root-ca.crt",
			res: res("kubelet", "", "configmaps"), ns: "default", want: []string{"default/kube-root-ca.crt"}},
		{name: "kubelet's ConfigMap by name", c: kubelet, path: "/api/v1/namespaces/" + ns + "/configmaps", fs: "metadata.name=wl-cm",
			res: res("kubelet", "", "configmaps"), ns: ns, want: []string{ns + "/wl-cm"}},
		{name: "kubelet's pods", c: kubelet, path: "/api/v1/pods", fs: "spec.nodeName=" + harness.NodeName,
			res: res("kubelet", "", "pods"), want: []string{ns + "/wl-a", ns + "/wl-b"}},
		{name: "kubelet's RuntimeClasses", c: kubelet, path: "/apis/node.k8s.io/v1/runtimeclasses",
			res: res("kubelet", "node.k8s.io", "runtimeclasses"), want: []string{"/wl-rc"}},
		{name: "kubelet's CSIDrivers (none)", c: kubelet, path: "/apis/storage.k8s.io/v1/csidrivers",
			res: res("kubelet", "storage.k8s.io", "csidrivers")},
		{name: "kube-proxy's EndpointSlices", c: proxy, path: "/apis/discovery.k8s.io/v1/endpointslices", ls: kubeProxySelector,
			res: res("kube-proxy", "discovery.k8s.io", "endpointslices"), pool: true, want: []string{ns + "/web-abc"}, absent: []string{ns + "/hl-abc"}},
		{name: "kube-proxy's Services", c: proxy, path: "/api/v1/services", ls: kubeProxySelector,
			res: res("kube-proxy", "", "services"), pool: true, want: []string{ns + "/web", ns + "/hl"}},
		{name: "coredns's EndpointSlices", c: coredns, path: "/apis/discovery.k8s.io/v1/endpointslices",
			res: res("coredns", "discovery.k8s.io", "endpointslices"), want: []string{ns + "/web-abc", ns + "/hl-abc"}},
		{name: "coredns's Services", c: coredns, path: "/api/v1/services",
			res: res("coredns", "", "services"), want: []string{ns + "/web", ns + "/hl"}},
		{name: "coredns's Namespaces", c: coredns, path: "/api/v1/namespaces",
			res: res("coredns", "", "namespaces"), want: []string{"/" + ns}},
	}

	// Online: each watch-list passes through (or comes from the shared store) whole.
	online := map[string]wlAnswer{}
	for _, c := range cases {
		a := c.c.watchList(t, c.path, c.ls, c.fs, "")
		if a.code != http.StatusOK || !a.ended || a.rv == "" {
			t.Fatalf("online, %s: %d, initial events ended %v at %q %s", c.name, a.code, a.ended, a.rv, a.body)
		}
		for _, w := range c.want {
			if !slices.Contains(a.names, w) {
				t.Fatalf("online, %s: %v without %s", c.name, a.names, w)
			}
		}
		for _, w := range c.absent {
			if slices.Contains(a.names, w) {
				t.Fatalf("online, %s: %v with %s, which its selector leaves out", c.name, a.names, w)
			}
		}
		if c.c.accept == acceptProtobuf && !strings.HasPrefix(a.ct, wire.MediaProtobuf) {
			t.Fatalf("online, %s answered in %s", c.name, a.ct)
		}
		online[c.name] = a
	}

	// Each watch-list is kept as its list: complete, at its bookmark's resourceVersion (the shared
	// store's reads, as the hub's own, for pool-scope resources the store served).
	eventually(t, 30*time.Second, "the watch-lists kept as lists", func() error {
		v, err := cache.OpenView(h.CacheDir)
		if err != nil {
			return err
		}
		defer v.Close()
		for _, c := range cases {
			r := c.res
			if r.Owner == "coredns" {
				for _, o := range v.Owners() {
					if strings.HasPrefix(o, "coredns@") {
						r.Owner = o
					}
				}
			}
			rec, err := v.List(r, c.ns, c.ls, c.fs)
			if err == nil && rec.Complete && rec.ResourceVersion == online[c.name].rv {
				continue
			}
			if c.pool {
				r.Owner = cache.SelfComponent
				if shared, err2 := v.List(r, "", "", ""); err2 == nil && shared.Complete {
					continue
				}
			}
			return fmt.Errorf("%s: recorded as %+v (%v), want complete at %s", c.name, rec, err, online[c.name].rv)
		}
		return nil
	})

	// The link goes black.
	if err := relay.BlackHole(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the hub knows it is offline", func() error {
		if v, _ := h.Metric(fmt.Sprintf(`nodehub_server_healthy{server="%s"}`, relay.Addr)); v != 0 {
			return errorf("server still healthy")
		}
		return nil
	})

	// Offline: the same watch-lists and their LISTs, answered completely from the cache.
	for _, c := range cases {
		want := online[c.name]
		same := func(form string, a wlAnswer) {
			t.Helper()
			got, exp := slices.Sorted(slices.Values(a.names)), slices.Sorted(slices.Values(want.names))
			if a.code != http.StatusOK || !slices.Equal(got, exp) {
				t.Errorf("offline %s, %s: %d %v, online %v %s", form, c.name, a.code, got, exp, a.body)
			}
			if !c.pool && a.rv != want.rv {
				t.Errorf("offline %s, %s: at resourceVersion %q, online %q", form, c.name, a.rv, want.rv)
			}
			if c.c.accept == acceptProtobuf && a.code == http.StatusOK && !strings.HasPrefix(a.ct, wire.MediaProtobuf) {
				t.Errorf("offline %s, %s: answered in %s", form, c.name, a.ct)
			}
		}
		a := c.c.watchList(t, c.path, c.ls, c.fs, "")
		if !a.ended {
			t.Errorf("offline watch-list, %s: no initial-events-end bookmark", c.name)
		}
		same("watch-list", a)
		// As a reflector re-lists after a failed watch: NotOlderThan its last resourceVersion.
		same("watch-list from its resourceVersion", c.c.watchList(t, c.path, c.ls, c.fs, want.rv))
		same("list", c.c.list(t, c.path, c.ls, c.fs))
	}

	// What was never listed: the watch-list gets the clear error its LIST gets (client-go falls
	// back to the LIST, and reports it).
	w := kubelet.watchList(t, "/apis/storage.k8s.io/v1/volumeattachments", "", "", "")
	l := kubelet.list(t, "/apis/storage.k8s.io/v1/volumeattachments", "", "")
	if w.code != http.StatusNotFound || l.code != w.code || !strings.Contains(w.body, "never cached") || !strings.Contains(l.body, "never cached") {
		t.Errorf("offline, never listed: watch-list %d %s; list %d %s", w.code, w.body, l.code, l.body)
	}
}

// corednsToken makes a ServiceAccount that may read what CoreDNS reads, and a token of it.
func corednsToken(t *testing.T, ctx context.Context, ns string) string {
	t.Helper()
	return saToken(t, ctx, ns, "coredns-wl", "coredns-wl", rbacv1.PolicyRule{APIGroups: []string{"", "discovery.k8s.io"},
		Resources: []string{"services", "endpointslices", "namespaces", "pods"}, Verbs: []string{"list", "watch"}})
}
