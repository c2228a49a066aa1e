package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"nodehub/cache"
	"nodehub/hub/remote"
	"nodehub/pool"
	"nodehub/wire"
)

// wlQuery is the query of client-go ≥ 1.35's reflector in place of a LIST (KEP-3157).
const wlQuery = "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=300"

func testPod(name, node, rv string) *corev1.Pod {
	return &corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("u-" + name), ResourceVersion: rv},
		Spec:       corev1.PodSpec{NodeName: node}}
}

// encodeObj is an object as the apiserver writes it in a watch event of the format.
func encodeObj(t *testing.T, obj wire.Typed, pb bool) []byte {
	t.Helper()
	b, err := wire.Encode(obj, pb)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSpace(b)
}

// initialEvents is a watch-list's answer: the objects as ADDED, then the bookmark that ends them.
func initialEvents(pb bool, av, kind, rv string, objs ...[]byte) []byte {
	var out []byte
	ev := func(typ string, obj []byte) {
		e := wire.WatchEvent{Type: typ, Object: obj}
		if pb {
			out = append(out, wire.EncodeProtoWatchEvent(e)...)
		} else {
			out = append(out, wire.EncodeJSONWatchEvent(e)...)
		}
	}
	for _, o := range objs {
		ev(wire.EventAdded, o)
	}
	ev(wire.EventBookmark, wire.BookmarkObject(av, kind, rv, true, pb))
	return out
}

func watchCT(pb bool) string {
	if pb {
		return wire.MediaProtobuf + ";stream=watch"
	}
	return wire.MediaJSON
}

// watchLists makes the fake cloud answer watch-lists of the paths given: the stream, then the
// watch stays open until the client leaves.
func watchLists(c *fakeCloud, pb bool, streams map[string][]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.handle = func(w http.ResponseWriter, r *http.Request) bool {
		body, ok := streams[r.URL.Path]
		if !ok || r.URL.Query().Get("sendInitialEvents") != "true" {
			return false
		}
		w.Header().Set("Content-Type", watchCT(pb))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		return true
	}
}

// rootCA is kube-root-ca.crt as the apiserver writes it in the format (every pod's ServiceAccount
// volume needs it).
func rootCA(t *testing.T, pb bool) []byte {
	return encodeObj(t, &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt", Namespace: "default", UID: "u-ca", ResourceVersion: "3"},
		Data:       map[string]string{"ca.crt": "PEM"}}, pb)
}

// watched is a watch's answer as a client read it.
type watched struct {
	code   int
	ct     string
	events []wire.WatchEvent
	body   string // an error answer
}

// added names the ADDED objects; end is the resourceVersion of the initial-events-end bookmark.
func (a watched) added(t *testing.T) (names []string, end string) {
	t.Helper()
	for _, ev := range a.events {
		m, err := wire.ExtractMeta(ev.Object, "")
		if err != nil {
			t.Fatalf("event %s: %v", ev.Type, err)
		}
		switch {
		case ev.Type == wire.EventAdded:
			names = append(names, m.Name)
		case ev.Type == wire.EventBookmark && wire.EndsInitialEvents(ev.Object):
			end = m.ResourceVersion
		}
	}
	return names, end
}

// watchUntilListed sends a watch and reads its events up to the initial-events-end bookmark (or
// the end of the answer), then leaves.
func (f *proxyFixture) watchUntilListed(t *testing.T, path, ua, auth string, pb bool) watched {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.url+path, nil)
	req.Header.Set("User-Agent", ua)
	if pb {
		req.Header.Set("Accept", wire.MediaProtobuf+", "+wire.MediaJSON)
	} else {
		req.Header.Set("Accept", wire.MediaJSON)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a := watched{code: resp.StatusCode, ct: resp.Header.Get("Content-Type")}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		a.body = string(b)
		return a
	}
	done := errors.New("listed")
	sp := wire.NewWatchSplitter(wire.ParseMediaType(a.ct), func(ev wire.WatchEvent) error {
		ev.Frame = nil
		a.events = append(a.events, ev)
		if ev.Type == wire.EventBookmark && wire.EndsInitialEvents(ev.Object) {
			return done
		}
		return nil
	})
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := sp.Write(buf[:n]); errors.Is(werr, done) {
				return a
			} else if werr != nil {
				t.Fatalf("watch of %s: %v", path, werr)
			}
		}
		if err != nil {
			return a
		}
	}
}

// listed reads a JSON list's item names and resourceVersion.
func listed(t *testing.T, a answer) ([]string, string) {
	t.Helper()
	var l struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(a.body), &l); err != nil {
		t.Fatalf("list %d: %v: %s", a.code, err, a.body)
	}
	var names []string
	for _, it := range l.Items {
		names = append(names, it.Metadata.Name)
	}
	return names, l.Metadata.ResourceVersion
}

// kubelet's watch-lists pass through to the cloud as they are, are kept as lists, and offline the
// same watch-lists and the LISTs they fall back to are answered from them: its pods by node, its
// ConfigMap by name (kube-root-ca.crt, which every pod's ServiceAccount volume needs), an empty
// list of RuntimeClasses. JSON and protobuf.
func TestProxyWatchListIsKeptAndAnsweredOffline(t *testing.T) {
	for _, pb := range []bool{false, true} {
		name := "json"
		if pb {
			name = "protobuf"
		}
		t.Run(name, func(t *testing.T) {
			f := newProxyFixture(t, nil)
			web, web2 := encodeObj(t, testPod("web", "node-a", "5"), pb), encodeObj(t, testPod("web2", "node-a", "6"), pb)
			ca := rootCA(t, pb)
			podStream := initialEvents(pb, "v1", "Pod", "10", web, web2)
			watchLists(f.cloud, pb, map[string][]byte{
				"/api/v1/pods":                          podStream,
				"/api/v1/namespaces/default/configmaps": initialEvents(pb, "v1", "ConfigMap", "11", ca),
				"/apis/node.k8s.io/v1/runtimeclasses":   initialEvents(pb, "node.k8s.io/v1", "RuntimeClass", "12"),
			})
			pods := "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a&" + wlQuery
			cms := "/api/v1/namespaces/default/configmaps?fieldSelector=metadata.name%3Dkube-root-ca.crt&" + wlQuery
			rcs := "/apis/node.k8s.io/v1/runtimeclasses?" + wlQuery

			a := f.watchUntilListed(t, pods, kubelet, "", pb)
			var got []byte
			for _, ev := range a.events {
				if pb {
					got = append(got, wire.EncodeProtoWatchEvent(ev)...)
				} else {
					got = append(got, wire.EncodeJSONWatchEvent(ev)...)
				}
			}
			if a.code != http.StatusOK || !bytes.Equal(got, podStream) {
				t.Fatalf("online watch-list: %d, not the cloud's events", a.code)
			}
			f.watchUntilListed(t, cms, kubelet, "", pb)
			f.watchUntilListed(t, rcs, kubelet, "", pb)
			f.offline(t)
			f.cloud.took()

			for _, c := range []struct {
				path, names, rv string
			}{
				{pods, "web,web2", "10"},
				{strings.Replace(pods, "watch=1&", "watch=1&resourceVersion=10&", 1), "web,web2", "10"}, // NotOlderThan a resourceVersion
				{cms, "kube-root-ca.crt", "11"},
				{rcs, "", "12"},
			} {
				a := f.watchUntilListed(t, c.path, kubelet, "", pb)
				names, rv := a.added(t)
				if a.code != http.StatusOK || strings.Join(names, ",") != c.names || rv != c.rv {
					t.Fatalf("offline watch-list %s: %d %v up to rv %q %s", c.path, a.code, names, rv, a.body)
				}
				if pb && !strings.HasPrefix(a.ct, wire.MediaProtobuf) {
					t.Fatalf("offline watch-list %s answered in %s", c.path, a.ct)
				}
				list := f.do(t, http.MethodGet, strings.SplitN(c.path, "watch=1", 2)[0], kubelet, "", "")
				names, rv = listed(t, list)
				if list.code != http.StatusOK || strings.Join(names, ",") != c.names || rv != c.rv {
					t.Fatalf("offline list %s: %d %v at rv %q", c.path, list.code, names, rv)
				}
			}
			if got := f.cloud.took(); len(got) != 0 {
				t.Fatalf("offline, the cloud got %v", paths(got))
			}
		})
	}
}

// Offline, a watch-list of what was never listed gets the same clear error as its LIST (client-go
// falls back to the LIST, and gets it again); kubelet's watch-list of its pods keeps the LIST's
// rule: never a partial list.
func TestProxyWatchListOfflineErrors(t *testing.T) {
	f := newProxyFixture(t, nil)
	watchLists(f.cloud, false, map[string][]byte{"/api/v1/pods": initialEvents(false, "v1", "Pod", "10", []byte(podWeb))})
	pods := "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a&" + wlQuery
	f.watchUntilListed(t, pods, kubelet, "", false)
	f.offline(t)

	w := f.watchUntilListed(t, "/apis/storage.k8s.io/v1/csidrivers?"+wlQuery, kubelet, "", false)
	l := f.do(t, http.MethodGet, "/apis/storage.k8s.io/v1/csidrivers", kubelet, "", "")
	if w.code != http.StatusNotFound || w.body != l.body || l.code != w.code || !strings.Contains(w.body, "never cached") {
		t.Fatalf("offline watch-list of what was never cached: %d %s; its list: %d %s", w.code, w.body, l.code, l.body)
	}

	if err := f.hub.cache.Store.MarkIncomplete(cache.Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}); err != nil {
		t.Fatal(err)
	}
	if w := f.watchUntilListed(t, pods, kubelet, "", false); w.code != http.StatusServiceUnavailable || len(w.events) != 0 {
		t.Fatalf("kubelet's watch-list of its pods, incomplete: %d %d events, want 503", w.code, len(w.events))
	}
}

// A watch-list cut before its initial-events-end bookmark records nothing, and the list recorded
// before is answered offline as it was.
func TestProxyWatchListCutKeepsThePriorList(t *testing.T) {
	f := newProxyFixture(t, nil)
	web2 := strings.ReplaceAll(strings.ReplaceAll(podWeb, `"web"`, `"web2"`), `"resourceVersion":"5"`, `"resourceVersion":"6"`)
	var mu sync.Mutex
	cut := false
	f.cloud.handle = func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Query().Get("sendInitialEvents") != "true" {
			return false
		}
		w.Header().Set("Content-Type", wire.MediaJSON)
		w.WriteHeader(http.StatusOK)
		mu.Lock()
		defer mu.Unlock()
		if cut { // one new pod, and the stream ends before the bookmark
			_, _ = w.Write(wire.EncodeJSONWatchEvent(wire.WatchEvent{Type: wire.EventAdded, Object: []byte(strings.ReplaceAll(podWeb, `"web"`, `"web3"`))}))
			return true
		}
		_, _ = w.Write(initialEvents(false, "v1", "Pod", "10", []byte(podWeb), []byte(web2)))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		return true
	}
	pods := "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a&" + wlQuery
	f.watchUntilListed(t, pods, kubelet, "", false)
	mu.Lock()
	cut = true
	mu.Unlock()
	if a := f.watchUntilListed(t, pods, kubelet, "", false); len(a.events) != 1 {
		t.Fatalf("the cut watch-list: %d %v", a.code, a.events)
	}
	f.offline(t)
	rec, err := f.hub.cache.Store.List(cache.Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}, "", "", "spec.nodeName=node-a")
	if err != nil || rec.ResourceVersion != "10" || !rec.Complete || strings.Join(rec.Keys, ",") != "default/web,default/web2" {
		t.Fatalf("after a cut watch-list the record is %+v %v", rec, err)
	}
	names, end := f.watchUntilListed(t, pods, kubelet, "", false).added(t)
	if !strings.Contains(strings.Join(names, ","), "web,web2") || end == "" {
		t.Fatalf("offline after a cut watch-list: %v up to %q", names, end)
	}
}

// A client with credentials of its own (a ServiceAccount's token) keeps its watch-list in its own
// cache: offline the same token's watch-list and LIST are answered, another token's are not.
func TestProxyWatchListOfATokenKeptForThatToken(t *testing.T) {
	f := newProxyFixture(t, nil)
	slice := `{"kind":"EndpointSlice","apiVersion":"discovery.k8s.io/v1","metadata":{"name":"dns-x","namespace":"kube-system","uid":"u9","resourceVersion":"8","labels":{"kubernetes.io/service-name":"kube-dns"}},"addressType":"IPv4","endpoints":[]}`
	watchLists(f.cloud, false, map[string][]byte{"/apis/discovery.k8s.io/v1/endpointslices": initialEvents(false, "discovery.k8s.io/v1", "EndpointSlice", "20", []byte(slice))})
	const tok = "Bearer coredns-token"
	path := "/apis/discovery.k8s.io/v1/endpointslices?" + wlQuery
	if a := f.watchUntilListed(t, path, "coredns/1.15", tok, false); a.code != http.StatusOK {
		t.Fatalf("online: %d %s", a.code, a.body)
	}
	f.offline(t)
	if names, end := f.watchUntilListed(t, path, "coredns/1.15", tok, false).added(t); strings.Join(names, ",") != "dns-x" || end != "20" {
		t.Fatalf("offline watch-list of the token: %v up to %q", names, end)
	}
	if names, rv := listed(t, f.do(t, http.MethodGet, "/apis/discovery.k8s.io/v1/endpointslices", "coredns/1.15", tok, "")); strings.Join(names, ",") != "dns-x" || rv != "20" {
		t.Fatalf("offline list of the token: %v at %q", names, rv)
	}
	if a := f.watchUntilListed(t, path, "coredns/1.15", "Bearer another-token", false); a.code == http.StatusOK {
		t.Fatalf("another token read the first one's watch-list: %d", a.code)
	}
}

// The pool's shared stores: a node client's watch-list of a pool-scope resource is served from the
// store (its objects, then the initial-events-end bookmark); what the store received is kept (as
// the hub's own), so offline the same watch-list and LIST are answered. A watch-list the store
// itself receives (listwatch may use one) is kept as its list too.
func TestProxyWatchListOfThePoolStore(t *testing.T) {
	f := newProxyFixture(t, func(c *Config) {
		c.Pool.Resources = []pool.Resource{{Version: "v1", Resource: "services"}}
	})
	f.runPool(t)
	path := "/api/v1/services?" + wlQuery
	a := f.watchUntilListed(t, path, "kube-proxy/v1.37.2", "", false)
	if names, end := a.added(t); strings.Join(names, ",") != "kubernetes" || end != "4" {
		t.Fatalf("online watch-list from the shared store: %d %v up to %q", a.code, names, end)
	}
	f.offline(t)
	if names, end := f.watchUntilListed(t, path, "kube-proxy/v1.37.2", "", false).added(t); strings.Join(names, ",") != "kubernetes" || end != "4" {
		t.Fatalf("offline watch-list of a pool-scope resource: %v up to %q", names, end)
	}
	if names, rv := listed(t, f.do(t, http.MethodGet, "/api/v1/services", "kube-proxy/v1.37.2", "", "")); strings.Join(names, ",") != "kubernetes" || rv != "4" {
		t.Fatalf("offline list of a pool-scope resource: %v at %q", names, rv)
	}

	// The store's own read as a watch-list: teed and kept as the hub's list.
	req, _ := http.NewRequest(http.MethodGet, "https://cloud/api/v1/namespaces/kube-system/services?"+wlQuery, nil)
	svc := strings.ReplaceAll(strings.ReplaceAll(svcKube, `"kubernetes"`, `"kube-dns"`), `"default"`, `"kube-system"`)
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {wire.MediaJSON}}, Request: req,
		Body: io.NopCloser(bytes.NewReader(initialEvents(false, "v1", "Service", "30", []byte(svc))))}
	f.hub.poolTee(req, resp)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err := f.hub.cache.Writer.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec, err := f.hub.cache.Store.List(cache.Resource{Owner: cache.SelfComponent, Version: "v1", Resource: "services"}, "kube-system", "", "")
	if err != nil || rec.ResourceVersion != "30" || !rec.Complete || strings.Join(rec.Keys, ",") != "kube-system/kube-dns" {
		t.Fatalf("the store's watch-list kept as %+v %v", rec, err)
	}
}

// Before the first heartbeat's verdict, a watch-list the cache can answer is a read like a LIST:
// answered from the cache rather than waiting on a link that may be dead.
func TestProxyColdWatchListFromTheCache(t *testing.T) {
	f := newProxyFixture(t, nil)
	watchLists(f.cloud, false, map[string][]byte{"/api/v1/pods": initialEvents(false, "v1", "Pod", "10", []byte(podWeb))})
	pods := "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a&" + wlQuery
	f.watchUntilListed(t, pods, kubelet, "", false)
	if err := f.hub.cache.Writer.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.cloud.took()
	f.hub.state.set(remote.Unknown)
	if names, end := f.watchUntilListed(t, pods, kubelet, "", false).added(t); strings.Join(names, ",") != "web" || end != "10" {
		t.Fatalf("cold watch-list: %v up to %q", names, end)
	}
	if got := f.cloud.took(); len(got) != 0 {
		t.Fatalf("a cold watch-list the cache answers went to the cloud: %v", paths(got))
	}
}
