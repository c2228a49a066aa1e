package local

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"nodehub/cache"
	"nodehub/wire"
)

// kubelet's offline status writes to its node reach its watch of the node, as the apiserver's
// watch sends every write: kubelet v1.37 compares a new status with its informer's copy, so a
// Ready=False it patched and then put back to True must show in that copy, or the True is never
// sent ("CSINode is not yet initialized" for minutes after a restart early in an outage).
func TestOfflineWatchFollowsOfflineWrites(t *testing.T) {
	st, err := cache.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	const node = `{"kind":"Node","apiVersion":"v1","metadata":{"name":"edge-1","uid":"n1","resourceVersion":"5"},"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady"}]}}`
	k := cache.Key{Resource: cache.Resource{Owner: "kubelet", Version: "v1", Resource: "nodes"}, Name: "edge-1"}
	h := cache.Header{ContentType: wire.MediaJSON, APIVersion: "v1", Kind: "Node", Name: "edge-1", UID: "n1", ResourceVersion: "5"}
	if err := st.Put(k, &h, []byte(node)); err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Store: st, NodeName: "edge-1", Online: func() bool { return false }}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ri, err := wire.ParseRequest(r)
		if err != nil {
			t.Error(err)
			return
		}
		p.ServeHTTP(w, r, &Request{Info: ri, Own: "kubelet", Shared: true, Vouched: true})
	}))
	defer srv.Close()
	kubelet := caller{ua: "kubelet/v1.37.2", own: "kubelet", node: true}

	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/nodes?fieldSelector=metadata.name%3Dedge-1&watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true", nil)
	req.Header.Set("User-Agent", kubelet.ua)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := make(chan map[string]any, 10)
	go func() {
		defer close(events)
		dec := json.NewDecoder(bufio.NewReader(resp.Body))
		for {
			var ev map[string]any
			if dec.Decode(&ev) != nil {
				return
			}
			if ev["type"] != wire.EventBookmark {
				events <- ev
			}
		}
	}()
	expect := func(typ, want string) {
		t.Helper()
		select {
		case ev, ok := <-events:
			raw, _ := json.Marshal(ev["object"])
			if !ok || ev["type"] != typ || !bytes.Contains(raw, []byte(want)) {
				t.Fatalf("event %v %s, want %s with %s", ev["type"], raw, typ, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no %s with %s", typ, want)
		}
	}
	expect(wire.EventAdded, `"status":"True"`)
	for _, status := range []string{"False", "True"} {
		patch := `{"status":{"conditions":[{"type":"Ready","status":"` + status + `"}]}}`
		if w := kubelet.send(t, p, http.MethodPatch, "/api/v1/nodes/edge-1/status", "application/strategic-merge-patch+json", patch); w.Code != http.StatusOK {
			t.Fatalf("status patch offline: %d %s", w.Code, w.Body)
		}
		expect(wire.EventModified, `"status":"`+status+`"`)
	}
}
