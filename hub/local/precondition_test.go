package local

import (
	"net/http"
	"strings"
	"testing"

	"nodehub/cache"
	"nodehub/wire"
)

// Offline, an update (PUT) of the node's status from a client holding an older copy than the
// cache's is answered 409 Conflict, as the apiserver does, and the copy keeps the annotations
// written since; one naming the cached resourceVersion, or none, is applied.
func TestOfflineUpdateFromAnOldCopyConflicts(t *testing.T) {
	p := newProxy(t)
	const node = `{"kind":"Node","apiVersion":"v1","metadata":{"name":"edge-1","uid":"n1","resourceVersion":"7","annotations":{"flannel":"ip"}},"status":{"conditions":[{"type":"Ready","status":"True"}]}}`
	kubelet, k := cachedNode(t, p, node)
	put := func(rv string) *httpResult {
		body := `{"kind":"Node","apiVersion":"v1","metadata":{"name":"edge-1","uid":"n1"` + rv + `},"status":{"conditions":[{"type":"Ready","status":"False"}]}}`
		w := kubelet.send(t, p, http.MethodPut, "/api/v1/nodes/edge-1/status", "application/json", body)
		return &httpResult{w.Code, w.Body.String()}
	}
	if a := put(`,"resourceVersion":"5"`); a.code != http.StatusConflict || !strings.Contains(a.body, `"reason":"Conflict"`) {
		t.Fatalf("a PUT from an old copy: %d %s, want 409 Conflict", a.code, a.body)
	}
	it, err := p.Store.GetObject(k)
	if err != nil {
		t.Fatal(err)
	}
	if string(it.Body) != node {
		t.Fatalf("the refused PUT changed the copy: %s", it.Body)
	}
	if a := put(`,"resourceVersion":"7"`); a.code != http.StatusOK || !strings.Contains(a.body, `"status":"False"`) {
		t.Fatalf("a PUT from the cached copy: %d %s", a.code, a.body)
	}
	if a := put(""); a.code != http.StatusOK || !strings.Contains(a.body, `"status":"False"`) {
		t.Fatalf("an unconditional PUT: %d %s", a.code, a.body)
	}
}

// cachedNode puts node (JSON) in kubelet's cache as the cloud's copy and returns kubelet and the
// copy's key.
func cachedNode(t *testing.T, p *Proxy, node string) (caller, cache.Key) {
	t.Helper()
	m, err := wire.ExtractMeta([]byte(node), "nodes")
	if err != nil {
		t.Fatal(err)
	}
	kubelet := caller{ua: "kubelet/v1.34.4", own: "kubelet", node: true}
	k := cache.Key{Resource: cache.Resource{Owner: kubelet.own, Version: "v1", Resource: "nodes"}, Name: m.Name}
	h := cache.Header{ContentType: wire.MediaJSON, APIVersion: m.APIVersion, Kind: m.Kind, Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion}
	if err := p.Store.Put(k, &h, []byte(node)); err != nil {
		t.Fatal(err)
	}
	return kubelet, k
}

type httpResult struct {
	code int
	body string
}
