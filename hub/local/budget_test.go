package local

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/cache"
	"nodehub/wire"
)

// floodAsPod sends a request with a pod's own credential, one the cloud accepted.
func floodAsPod(t *testing.T, p *Proxy, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, path, bytes.NewBufferString(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer sa-token")
	ri, err := wire.ParseRequest(r)
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	p.ServeHTTP(w, r, &Request{Info: ri, Own: "flooder@sa", Vouched: true})
	return w
}

func wearText(n int) string {
	b := make([]byte, n/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func flashWritten(p *Proxy) int64 {
	st := p.Store.Stats()
	return st.BytesWritten + st.CompactedBytes
}

// Issue 28: one pod re-creating one 2.9 MB event offline wrote 686 MiB in 30 s (184 creates, all
// 201). A pod's offline writes are held to a budget of flash bytes a minute: an event larger than
// the budget holds at once is refused for good (403, as past a quota), a smaller one past the budget
// gets 429 with Retry-After, and the pod's creates write at most 2 MiB.
func TestOfflineEventFloodOfAPodIsHeldToTheFlashBudget(t *testing.T) {
	p := newProxy(t)
	event := func(name string, n int) string {
		return fmt.Sprintf(`{"apiVersion":"v1","kind":"Event","metadata":{"name":%q,"namespace":"default"},"involvedObject":{"kind":"Pod","name":"x","namespace":"default"},"reason":"Flood","message":%q}`, name, wearText(n))
	}
	w0 := flashWritten(p)
	for i := 0; i < 10; i++ {
		if w := floodAsPod(t, p, http.MethodPost, "/api/v1/namespaces/default/events", event("big", 2_900_000)); w.Code != http.StatusForbidden {
			t.Fatalf("a pod's offline create of a 2.9 MB event: %d %.300s, want 403", w.Code, w.Body)
		}
	}
	created, throttled := 0, 0
	for i := 0; i < 20; i++ {
		w := floodAsPod(t, p, http.MethodPost, "/api/v1/namespaces/default/events", event("mid", 100<<10))
		switch w.Code {
		case http.StatusCreated:
			created++
		case http.StatusTooManyRequests:
			throttled++
			var st metav1.Status
			secs, _ := strconv.Atoi(w.Header().Get("Retry-After"))
			if json.Unmarshal(w.Body.Bytes(), &st) != nil || st.Reason != metav1.StatusReasonTooManyRequests || secs < 1 ||
				st.Details == nil || int(st.Details.RetryAfterSeconds) != secs {
				t.Fatalf("past the budget: Retry-After %q, %s", w.Header().Get("Retry-After"), w.Body)
			}
		default:
			t.Fatalf("a pod's offline create of a 100 KiB event: %d %.300s", w.Code, w.Body)
		}
	}
	if w := flashWritten(p) - w0; created == 0 || throttled == 0 || w > 2<<20 {
		t.Fatalf("a pod's 30 offline creates: %d created, %d throttled, %d bytes written", created, throttled, w)
	}
}

// kubelet's status update that changes nothing (it repeats one when an answer is lost) writes
// nothing the second time.
func TestOfflineUnchangedStatusUpdateWritesNothing(t *testing.T) {
	p := newProxy(t)
	pod := []byte(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"default","uid":"u1","resourceVersion":"3"},"spec":{"nodeName":"edge-1"},"status":{"phase":"Pending"}}`)
	k := cache.Key{Resource: cache.Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}, Namespace: "default", Name: "p"}
	h := cache.Header{ContentType: wire.MediaJSON, APIVersion: "v1", Kind: "Pod", Namespace: "default", Name: "p", UID: "u1", ResourceVersion: "3",
		Fields: map[string]string{"spec.nodeName": "edge-1"}}
	if err := p.Store.Put(k, &h, pod); err != nil {
		t.Fatal(err)
	}
	patch := `{"status":{"phase":"Running","podIP":"10.0.0.7"}}`
	for i, want := range []string{"written", "not written"} {
		w0 := flashWritten(p)
		r := httptest.NewRequest(http.MethodPatch, "/api/v1/namespaces/default/pods/p/status", bytes.NewBufferString(patch))
		r.Header.Set("Content-Type", "application/strategic-merge-patch+json")
		r.Header.Set("User-Agent", "kubelet/v1.34.4 (linux/arm64) kubernetes/e2e")
		ri, err := wire.ParseRequest(r)
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		p.ServeHTTP(w, r, &Request{Info: ri, Own: "kubelet", Shared: true})
		if w.Code != http.StatusOK || !bytes.Contains(w.Body.Bytes(), []byte(`"podIP":"10.0.0.7"`)) {
			t.Fatalf("status patch %d: %d %s", i, w.Code, w.Body)
		}
		if wrote := flashWritten(p) > w0; wrote != (i == 0) {
			t.Fatalf("status patch %d: %s wanted, %d bytes", i, want, flashWritten(p)-w0)
		}
	}
}
