package local

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"nodehub/cache"
	"nodehub/pool"
	"nodehub/wire"
)

// stubRevisions rewrites one address into another; each change makes a new one.
type stubRevisions struct {
	mu        sync.Mutex
	from, to  string
	sent      string // what the watch sent last ("" nothing)
	next      chan struct{}
	passCount int
}

func (s *stubRevisions) rewrite(to string) func([]byte) []byte {
	from := s.from
	return func(raw []byte) []byte { return bytes.ReplaceAll(raw, []byte(from), []byte(to)) }
}

func (s *stubRevisions) Served() func([]byte) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = s.to
	return s.rewrite(s.to)
}

func (s *stubRevisions) Pass() (func([]byte) ([]byte, bool), <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.passCount++
	if s.sent == s.to {
		return nil, s.next
	}
	s.sent = s.to
	fn := s.rewrite(s.to)
	return func(raw []byte) ([]byte, bool) {
		out := fn(raw)
		return out, !bytes.Equal(out, raw)
	}, s.next
}

func (s *stubRevisions) set(to string) {
	s.mu.Lock()
	s.to = to
	close(s.next)
	s.next = make(chan struct{})
	s.mu.Unlock()
}

// An offline watch sends what a revision changes as MODIFIED: at its start (the client's list
// may predate it) and at each revision; lists and gets are revised as they are read.
func TestOfflineWatchSendsRevisions(t *testing.T) {
	st, err := cache.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	res := cache.Resource{Owner: "kube-proxy", Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}
	body := []byte(`{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"web-a","namespace":"ns","resourceVersion":"7"},"addressType":"IPv4","endpoints":[{"addresses":["10.0.0.1"]}]}`)
	h := &cache.Header{ContentType: wire.MediaJSON, APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice", Namespace: "ns", Name: "web-a", ResourceVersion: "7"}
	if err := st.Put(cache.Key{Resource: res, Namespace: "ns", Name: "web-a"}, h, body); err != nil {
		t.Fatal(err)
	}
	rev := &stubRevisions{from: "10.0.0.1", to: "10.0.0.9", next: make(chan struct{})}
	p := &Proxy{Store: st, Online: func() bool { return false },
		Revisions: func(ri *wire.RequestInfo) pool.Revisions { return rev }}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ri, err := wire.ParseRequest(r)
		if err != nil {
			t.Error(err)
			return
		}
		p.ServeHTTP(w, r, &Request{Info: ri, Own: "kube-proxy", Shared: true})
	}))
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(buf.Bytes(), []byte("10.0.0.9")) {
		t.Fatalf("list not revised: %s", buf.String())
	}

	rev.sent = "" // the client's list came from elsewhere
	resp, err = http.Get(srv.URL + "/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices?watch=true&resourceVersion=7")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := make(chan map[string]any, 10)
	go func() {
		dec := json.NewDecoder(bufio.NewReader(resp.Body))
		for {
			var ev map[string]any
			if dec.Decode(&ev) != nil {
				close(events)
				return
			}
			events <- ev
		}
	}()
	expect := func(addr string) {
		t.Helper()
		select {
		case ev := <-events:
			raw, _ := json.Marshal(ev["object"])
			if ev["type"] != wire.EventModified || !bytes.Contains(raw, []byte(addr)) {
				t.Fatalf("event %v %s, want MODIFIED with %s", ev["type"], raw, addr)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no MODIFIED with %s", addr)
		}
	}
	expect("10.0.0.9")
	rev.set("10.0.0.7")
	expect("10.0.0.7")
}
