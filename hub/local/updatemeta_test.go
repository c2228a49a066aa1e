package local

import (
	"net/http"
	"strings"
	"testing"

	"nodehub/wire"
)

// Offline, an unconditional update (PUT without resourceVersion) of the node keeps the cached
// copy's resourceVersion, uid, creation time and generation, as the apiserver keeps them; a
// client that then updates from the copy it read back is not refused; a PUT naming another uid
// is refused 409 and changes nothing.
func TestOfflineUnconditionalUpdateKeepsTheCopysVersion(t *testing.T) {
	p := newProxy(t)
	const node = `{"kind":"Node","apiVersion":"v1","metadata":{"name":"edge-1","uid":"n1","resourceVersion":"7","generation":3,"creationTimestamp":"2026-01-02T03:04:05Z"},"spec":{}}`
	kubelet, k := cachedNode(t, p, node)
	put := func(meta string) (int, string) {
		body := `{"kind":"Node","apiVersion":"v1","metadata":{"name":"edge-1"` + meta + `,"labels":{"a":"b"}},"spec":{"unschedulable":true}}`
		w := kubelet.send(t, p, http.MethodPut, "/api/v1/nodes/edge-1", "application/json", body)
		return w.Code, w.Body.String()
	}
	if code, body := put(`,"uid":"other"`); code != http.StatusConflict || !strings.Contains(body, "Precondition failed: UID") {
		t.Fatalf("a PUT naming another uid: %d %s, want 409", code, body)
	}
	code, body := put(`,"generation":9,"creationTimestamp":"2020-01-01T00:00:00Z"`)
	if code != http.StatusOK {
		t.Fatalf("an unconditional PUT: %d %s", code, body)
	}
	it, err := p.Store.GetObject(k)
	if err != nil {
		t.Fatal(err)
	}
	om, err := wire.ObjectMeta(it.Body)
	if err != nil {
		t.Fatal(err)
	}
	if om.ResourceVersion != "7" || om.UID != "n1" || om.Generation != 3 || om.CreationTimestamp.UTC().Format("2006-01-02T15:04:05Z") != "2026-01-02T03:04:05Z" || om.Labels["a"] != "b" {
		t.Fatalf("the kept copy after an unconditional PUT: %s", it.Body)
	}
	if it.Header.ResourceVersion != "7" {
		t.Fatalf("the copy's header lost its resourceVersion: %q", it.Header.ResourceVersion)
	}
	if code, body := put(`,"resourceVersion":"7"`); code != http.StatusOK {
		t.Fatalf("a PUT from the copy read back: %d %s", code, body)
	}
}
