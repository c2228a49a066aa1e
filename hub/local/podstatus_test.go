package local

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/cache"
	"nodehub/wire"
)

const (
	victimPod    = `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-1","namespace":"default","uid":"u1","resourceVersion":"7"},"spec":{"nodeName":"edge-1"},"status":{"podIP":"10.0.0.1","conditions":[{"type":"Ready","status":"True"}]}}`
	forgedStatus = `{"status":{"podIP":"10.66.6.6","podIPs":[{"ip":"10.66.6.6"}]}}`
	podStatusURL = "/api/v1/namespaces/default/pods/web-1/status"
)

// putPod caches raw for owner.
func putPod(t *testing.T, p *Proxy, owner, raw string) cache.Key {
	t.Helper()
	m, err := wire.ExtractMeta([]byte(raw), "pods")
	if err != nil {
		t.Fatal(err)
	}
	k := cache.Key{Resource: cache.Resource{Owner: owner, Version: "v1", Resource: "pods"}, Namespace: m.Namespace, Name: m.Name}
	h := cache.Header{ContentType: wire.MediaJSON, APIVersion: m.APIVersion, Kind: m.Kind, Namespace: m.Namespace, Name: m.Name,
		UID: m.UID, ResourceVersion: m.ResourceVersion, Labels: m.Labels, Fields: m.Fields}
	if err := p.Store.Put(k, &h, []byte(raw)); err != nil {
		t.Fatal(err)
	}
	return k
}

// caller is who sends a request to the offline proxy: its User-Agent, its own cache, and whether
// it has the node's identity (no credential of its own) or a bearer token.
type caller struct {
	ua, own string
	node    bool
}

func (c caller) send(t *testing.T, p *Proxy, method, path, ct, body string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Header.Set("Content-Type", ct)
	r.Header.Set("User-Agent", c.ua)
	if !c.node {
		r.Header.Set("Authorization", "Bearer a-pods-token")
	}
	ri, err := wire.ParseRequest(r)
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	p.ServeHTTP(w, r, &Request{Info: ri, Own: c.own, Shared: c.node, Vouched: true})
	return w
}

// Offline, a pod's status is kubelet's word alone: a pod whose own cache holds another pod (its
// ServiceAccount may read pods) and that PATCHes that pod's status in kubelet's User-Agent is
// refused with a Status, its cache keeps the cloud's copy, and the hub is told nothing; so is a
// node client that is not kubelet, and a PUT of the whole pod. The node's kubelet's write is
// applied, in its own cache.
func TestOfflinePodStatusWriteOnlyByKubelet(t *testing.T) {
	p := newProxy(t)
	var applied [][]byte
	p.Applied = func(_ *wire.RequestInfo, obj []byte) { applied = append(applied, obj) }
	const kubeletUA = "kubelet/v1.34.4 (linux/arm64) kubernetes/e2e"
	pod := caller{ua: kubeletUA, own: "kubelet@sa-hash"}
	podKey := putPod(t, p, pod.own, victimPod)
	kubeletKey := putPod(t, p, "kubelet", victimPod)
	putPod(t, p, "kube-proxy", victimPod)

	refused := []struct {
		name         string
		who          caller
		method, path string
		ct, body     string
	}{
		{"a pod's credential, kubelet's User-Agent, strategic merge patch", pod, http.MethodPatch, podStatusURL, "application/strategic-merge-patch+json", forgedStatus},
		{"a pod's credential, merge patch", pod, http.MethodPatch, podStatusURL, "application/merge-patch+json", forgedStatus},
		{"a pod's credential, PUT of the status", pod, http.MethodPut, podStatusURL, "application/json", strings.Replace(victimPod, "10.0.0.1", "10.66.6.6", 1)},
		{"a pod's credential, PUT of the whole pod", pod, http.MethodPut, "/api/v1/namespaces/default/pods/web-1", "application/json", strings.Replace(victimPod, "10.0.0.1", "10.66.6.6", 1)},
		{"the node's identity, not kubelet", caller{ua: "kube-proxy/v1.34.4", own: "kube-proxy", node: true}, http.MethodPatch, podStatusURL, "application/strategic-merge-patch+json", forgedStatus},
	}
	for _, c := range refused {
		w := c.who.send(t, p, c.method, c.path, c.ct, c.body)
		var st metav1.Status
		if w.Code != http.StatusServiceUnavailable || json.Unmarshal(w.Body.Bytes(), &st) != nil || st.Kind != "Status" || st.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s: %d %s, want a 503 Status", c.name, w.Code, w.Body)
		}
		if strings.HasSuffix(c.path, "/status") && !strings.Contains(st.Message, "only the node's kubelet may report pod status offline") {
			t.Fatalf("%s: %q does not say why", c.name, st.Message)
		}
		ri, _ := wire.ParseRequest(httptest.NewRequest(c.method, c.path, nil))
		if p.AnswersWrite(&Request{Info: ri, Shared: c.who.node}) {
			t.Fatalf("%s: AnswersWrite true: the hub would keep the body for an offline answer", c.name)
		}
	}
	if len(applied) != 0 {
		t.Fatalf("the hub was told of %d changes, want none", len(applied))
	}
	for _, owner := range p.Store.Owners() {
		k := podKey
		k.Resource.Owner = owner
		if it, err := p.Store.GetObject(k); err == nil && (it.Header.Local || bytes.Contains(it.Body, []byte("10.66.6.6"))) {
			t.Fatalf("%s's copy changed: %s", owner, it.Body)
		}
	}

	// The node's kubelet: applied, in its own cache, and the hub is told.
	kubelet := caller{ua: kubeletUA, own: "kubelet", node: true}
	report := `{"status":{"podIP":"10.0.0.11","podIPs":[{"ip":"10.0.0.11"}]}}`
	if w := kubelet.send(t, p, http.MethodPatch, podStatusURL, "application/strategic-merge-patch+json", report); w.Code != http.StatusOK {
		t.Fatalf("kubelet's status write: %d %s", w.Code, w.Body)
	}
	it, err := p.Store.GetObject(kubeletKey)
	if err != nil || !it.Header.Local || !bytes.Contains(it.Body, []byte("10.0.0.11")) {
		t.Fatalf("kubelet's cache: %v %s", err, it.Body)
	}
	if len(applied) != 1 || !bytes.Contains(applied[0], []byte("10.0.0.11")) {
		t.Fatalf("the hub was told %q", applied)
	}
	// A pod kubelet's own cache lacks is not changed in another cache (its reports are found
	// again in kubelet's cache alone).
	putPod(t, p, "kube-proxy", strings.ReplaceAll(victimPod, "web-1", "web-9"))
	if w := kubelet.send(t, p, http.MethodPatch, strings.ReplaceAll(podStatusURL, "web-1", "web-9"), "application/strategic-merge-patch+json", report); w.Code != http.StatusNotFound {
		t.Fatalf("a pod only another cache holds: %d %s", w.Code, w.Body)
	}
	if len(applied) != 1 {
		t.Fatalf("the hub was told of %d changes, want 1", len(applied))
	}
}

// A status write changes the status alone, as the apiserver's status strategy: a node client with
// kubelet's User-Agent (a host-network pod on loopback is the node's identity) whose status patch
// or update also carries a container image, a volume or a label leaves the pod's spec and
// metadata as the cloud sent them, in the copy kubelet reads back offline.
func TestOfflinePodStatusWriteChangesOnlyTheStatus(t *testing.T) {
	p := newProxy(t)
	kubeletKey := putPod(t, p, "kubelet", victimPod)
	kubelet := caller{ua: "kubelet/v1.34.4 (linux/arm64) kubernetes/e2e", own: "kubelet", node: true}
	evil := `{"metadata":{"labels":{"app":"evil"}},"spec":{"containers":[{"name":"c","image":"evil"}],"volumes":[{"name":"root","hostPath":{"path":"/"}}]},"status":{"podIP":"10.0.0.12"}}`
	var withEvil map[string]any
	if err := json.Unmarshal([]byte(victimPod), &withEvil); err != nil {
		t.Fatal(err)
	}
	withEvil["spec"] = map[string]any{"containers": []any{map[string]any{"name": "c", "image": "evil"}}}
	withEvil["status"] = map[string]any{"podIP": "10.0.0.13"}
	put, _ := json.Marshal(withEvil)
	for _, c := range []struct{ method, ct, body, ip string }{
		{http.MethodPatch, "application/strategic-merge-patch+json", evil, "10.0.0.12"},
		{http.MethodPatch, "application/merge-patch+json", evil, "10.0.0.12"},
		{http.MethodPut, "application/json", string(put), "10.0.0.13"},
	} {
		if w := kubelet.send(t, p, c.method, podStatusURL, c.ct, c.body); w.Code != http.StatusOK || bytes.Contains(w.Body.Bytes(), []byte("evil")) {
			t.Fatalf("%s %s: %d %s", c.method, c.ct, w.Code, w.Body)
		}
		it, err := p.Store.GetObject(kubeletKey)
		if err != nil || bytes.Contains(it.Body, []byte("evil")) || !bytes.Contains(it.Body, []byte(c.ip)) {
			t.Fatalf("%s %s: kubelet's copy %v %s", c.method, c.ct, err, it.Body)
		}
	}
}
