package hub

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// The routes the hub answers itself for the node (its lease, kubelet's GET of its node from the
// watched copy) answer in JSON or protobuf: a client that takes CBOR alone is sent the normal
// way (the cloud's CBOR, or 406), and a lease written in CBOR gets 415 so that client-go sends
// JSON from then on.
func TestOwnRoutesNeverAnswerCBOROnlyWithJSON(t *testing.T) {
	f := newProxyFixture(t, nil)
	f.cloud.handle = func(w http.ResponseWriter, r *http.Request) bool {
		if strings.Contains(r.Header.Get("Accept"), "cbor") {
			w.Header().Set("Content-Type", "application/cbor")
			_, _ = io.WriteString(w, cborBody)
			return true
		}
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := f.watchNodeA(t, ctx)
	defer resp.Body.Close()
	f.cloud.nodeEvents <- `{"type":"MODIFIED","object":` + nodeA(9, "v2") + `}`
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if a := f.getAccept(t, "/api/v1/nodes/node-a", kubelet, "application/json"); a.code != http.StatusOK || !strings.Contains(a.body, `"type":"Autonomy"`) {
		t.Fatalf("JSON GET of the node with a live watch: %d %s, want the watched copy", a.code, a.body)
	}
	for _, path := range []string{"/api/v1/nodes/node-a", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-a"} {
		a := f.getAccept(t, path, kubelet, "application/cbor")
		if a.code == http.StatusOK && a.header.Get("Content-Type") != "application/cbor" || a.code != http.StatusOK && a.code != http.StatusNotAcceptable {
			t.Fatalf("GET %s, CBOR alone: %d %q %q, want the cloud's CBOR or 406", path, a.code, a.header.Get("Content-Type"), a.body)
		}
	}
	req, err := http.NewRequest(http.MethodPut, f.url+"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-a", strings.NewReader(cborBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("User-Agent", kubelet)
	req.Header.Set("Content-Type", "application/cbor")
	req.Header.Set("Accept", "application/cbor;q=1, application/json;q=0.9")
	put, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	put.Body.Close()
	if put.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("a lease written in CBOR: %d, want 415", put.StatusCode)
	}
}
