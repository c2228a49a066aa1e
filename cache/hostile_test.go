package cache

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"nodehub/wire"
)

func podKey(name string) Key {
	return Key{Resource: Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}, Namespace: "default", Name: name}
}

// teeGzip tees a gzip-compressed answer to a get of url through the manager.
func teeGzip(t *testing.T, m *Manager, url string, plain io.Reader) {
	t.Helper()
	var zb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&zb, gzip.BestCompression)
	io.Copy(zw, plain)
	zw.Close()
	r, _ := http.NewRequest("GET", "http://hub"+url, nil)
	r.Header.Set("User-Agent", "kubelet/1")
	ri, _ := wire.ParseRequest(r)
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {wire.MediaJSON}, "Content-Encoding": {"gzip"}}, Body: io.NopCloser(bytes.NewReader(zb.Bytes()))}
	tb := m.Tee(ri, "kubelet", resp)
	io.Copy(io.Discard, tb)
	tb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Writer.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// A gzip answer to a get that decompresses past wire.MaxObjectBytes (here 70 MiB from ~70 KB)
// is not cached, not even cut to size; a whole one is.
func TestGzipBombObjectIsNotCached(t *testing.T) {
	s := openStore(t)
	m := newManager(s)
	head := `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"bomb","namespace":"default","resourceVersion":"1"},"x":"`
	teeGzip(t, m, "/api/v1/namespaces/default/pods/bomb", io.MultiReader(strings.NewReader(head), io.LimitReader(zeroDigits{}, 70<<20), strings.NewReader(`"}`)))
	if it, err := s.GetObject(podKey("bomb")); err == nil && it.Header != nil {
		t.Fatalf("a decompression bomb was cached: %d bytes", len(it.Body))
	}
	teeGzip(t, m, "/api/v1/namespaces/default/pods/ok", bytes.NewReader(podJSON(t, pod("ok", "edge-1", "2", nil))))
	if it, err := s.GetObject(podKey("ok")); err != nil || it.Header == nil {
		t.Fatalf("a whole gzip answer was not cached: %v", err)
	}
}

type zeroDigits struct{}

func (zeroDigits) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '0'
	}
	return len(p), nil
}

// A torn or malformed object is never cached: neither a get answer (a body that ended early but
// cleanly, as a broken proxy's does) nor a list item; a list holding one is not recorded, and a
// watch carrying one leaves the lists incomplete.
func TestMalformedObjectsAreNotCached(t *testing.T) {
	s := openStore(t)
	m := newManager(s)
	whole := podJSON(t, pod("torn", "edge-1", "1", nil))
	respond(t, m, "GET", "/api/v1/namespaces/default/pods/torn", "kubelet", whole[:len(whole)-9])
	if it, err := s.GetObject(podKey("torn")); err == nil && it.Header != nil {
		t.Fatalf("a torn get answer was cached: %q", it.Body)
	}
	list := `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[` +
		`{"metadata":{"name":"good","namespace":"default","resourceVersion":"3"}},` +
		`{"metadata":{"name":"bad","namespace":"default","resourceVersion":"4"},"spec":tru}]}`
	respond(t, m, "GET", "/api/v1/pods", "kubelet", []byte(list))
	if it, err := s.GetObject(podKey("bad")); err == nil && it.Header != nil {
		t.Fatalf("a malformed list item was cached: %q", it.Body)
	}
	if _, res := names(t, s, "kubelet", "", "", ""); res.Record != nil && res.Record.Complete {
		t.Fatal("a list with a malformed item was recorded complete")
	}
	// A good list is recorded complete; a watch with a malformed event then marks it incomplete.
	respond(t, m, "GET", "/api/v1/pods", "kubelet", listBody(t, "9", pod("good", "edge-1", "3", nil)))
	if _, res := names(t, s, "kubelet", "", "", ""); res.Record == nil || !res.Record.Complete {
		t.Fatalf("a good list was not recorded complete: %+v", res.Record)
	}
	respond(t, m, "GET", "/api/v1/pods?watch=1", "kubelet", []byte(`{"type":"MODIFIED","object":{"metadata":{"name":"good","namespace":"default","resourceVersion":"10"},"spec":[}]}`+"\n"))
	if _, res := names(t, s, "kubelet", "", "", ""); res.Record == nil || res.Record.Complete {
		t.Fatalf("a watch the cache could not follow left the list complete: %+v", res.Record)
	}
	if it, err := s.GetObject(podKey("good")); err != nil || it.Header == nil || it.Header.ResourceVersion != "3" {
		t.Fatalf("the malformed event replaced the object: %+v %v", it.Header, err)
	}
}

// Offline, every made-up credential is an owner of its own: the offline changes of all the owners
// that are not the node's own share one budget, so 30 credentials × 12 events of 1 MiB cannot
// take more than it (issue 23), and the node's own owners keep theirs.
func TestForeignOfflineChangesShareOneBudget(t *testing.T) {
	s := openStore(t)
	s.SetWriteBudget(WriteBudget{}) // the quotas alone, not the bytes a minute
	ev := func(owner string, i int) error {
		r := Resource{Owner: owner, Version: "v1", Resource: "events"}
		k := Key{Resource: r, Namespace: "default", Name: fmt.Sprintf("ev-%03d", i)}
		h := Header{ContentType: wire.MediaJSON, Name: k.Name, Namespace: "default", Local: true}
		return s.Put(k, &h, []byte(noise(1<<20)))
	}
	refused := 0
	for o := 0; o < 30; o++ {
		for i := 0; i < 12; i++ {
			if err := ev(fmt.Sprintf("flooder@forged-%d", o), i); errors.Is(err, ErrFull) {
				refused++
			} else if err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := s.ForeignLocalBytes(); got > DefaultForeignBudget {
		t.Fatalf("30 owners' offline events take %d bytes, past the budget of %d", got, DefaultForeignBudget)
	}
	if sz := s.Size(); sz > DefaultForeignBudget+1<<20 {
		t.Fatalf("the cache takes %d bytes after the flood", sz)
	}
	if refused == 0 {
		t.Fatal("no offline change was refused past the budget")
	}
	// The node's own owners are not in that budget.
	for i := 0; i < 4; i++ {
		if err := ev("kubelet", i); err != nil {
			t.Fatalf("kubelet's offline event after the flood: %v", err)
		}
	}
	// At a restart the budget is counted again from the logs.
	s.Close()
	s2, err := Open(s.Path(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got := s2.ForeignLocalBytes(); got == 0 || got > DefaultForeignBudget {
		t.Fatalf("after a restart the foreign offline changes count %d bytes", got)
	}
	// With --cache-max-bytes, they share an eighth of it.
	s2.SetMaxBytes(32 << 20)
	s2.SetWriteBudget(WriteBudget{})
	s = s2
	if err := ev("flooder@new", 0); !errors.Is(err, ErrFull) {
		t.Fatalf("a new owner's offline change past the budget of an eighth of --cache-max-bytes: %v", err)
	}
}
