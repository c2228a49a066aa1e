package hub

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"nodehub/pool"
)

// cborBody stands for a CBOR answer: what the fake cloud sends whoever asks for CBOR.
const cborBody = "\xd9\xd9\xf7CBOR"

// getAccept sends a GET to the proxy port with an Accept header of its own.
func (f *proxyFixture) getAccept(t *testing.T, path, ua, accept string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("User-Agent", ua)
	req.Header.Set("Accept", accept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, string(data)}
}

// A client that prefers CBOR but takes JSON too (client-go with ClientsPreferCBOR) is asked for
// JSON upstream: its answer is filtered and cached, and offline answered in JSON from the cache.
// A client that takes CBOR alone never gets another encoding: the cloud's CBOR, unfiltered and
// uncached, where no filter applies; 406 where one does, and offline.
func TestProxyNeverAnswersCBORWithAnotherEncoding(t *testing.T) {
	var mu sync.Mutex
	var accepts []string
	f := newProxyFixture(t, func(c *Config) {
		c.Filters = filterConfig()
		c.Pool.Resources = []pool.Resource{{Version: "v1", Resource: "services"}}
	})
	f.cloud.handle = func(w http.ResponseWriter, r *http.Request) bool {
		mu.Lock()
		accepts = append(accepts, r.Header.Get("Accept"))
		mu.Unlock()
		if strings.Contains(r.Header.Get("Accept"), "cbor") {
			w.Header().Set("Content-Type", "application/cbor")
			_, _ = io.WriteString(w, cborBody)
			return true
		}
		return false
	}
	f.runPool(t)
	const svc, pod = "/api/v1/namespaces/default/services/kubernetes", "/api/v1/namespaces/default/pods/web"
	prefer := "application/cbor, */*"
	a := f.getAccept(t, svc, kubelet, prefer)
	if a.code != http.StatusOK || !strings.Contains(a.body, `"clusterIP":"169.254.2.1"`) {
		t.Fatalf("kubelet preferring CBOR: %d %q, want JSON, filtered", a.code, a.body)
	}
	if a := f.getAccept(t, pod, "app/v1", prefer); a.code != http.StatusOK || a.body != podWeb {
		t.Fatalf("a client preferring CBOR: %d %q", a.code, a.body)
	}
	mu.Lock()
	for _, acc := range accepts {
		if strings.Contains(acc, "cbor") {
			t.Errorf("the cloud was asked Accept %q", acc)
		}
	}
	mu.Unlock()
	if a := f.getAccept(t, "/api/v1/services", kubelet, "application/cbor"); a.code != http.StatusNotAcceptable {
		t.Fatalf("CBOR alone, from the shared store and filtered: %d %q, want 406", a.code, a.body)
	}
	if a := f.getAccept(t, svc, kubelet, "application/cbor"); a.code != http.StatusNotAcceptable {
		t.Fatalf("CBOR alone, filtered: %d %q, want 406", a.code, a.body)
	}
	if a := f.getAccept(t, pod, "app/v1", "application/cbor"); a.code != http.StatusOK || a.body != cborBody || a.header.Get("Content-Type") != "application/cbor" {
		t.Fatalf("CBOR alone, unfiltered: %d %q, want the cloud's CBOR", a.code, a.body)
	}

	f.offline(t)
	if a := f.getAccept(t, svc, kubelet, prefer); a.code != http.StatusOK || !strings.Contains(a.body, `"clusterIP":"169.254.2.1"`) || !strings.HasPrefix(a.header.Get("Content-Type"), "application/json") {
		t.Fatalf("offline, preferring CBOR: %d %q", a.code, a.body)
	}
	if a := f.getAccept(t, pod, "app/v1", "application/cbor"); a.code != http.StatusNotAcceptable {
		t.Fatalf("offline, CBOR alone: %d %q, want 406", a.code, a.body)
	}
}
