package cache

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"nodehub/wire"
)

// An answer held whole (a get or list the hub read whole: kubelet's GET of its node, its
// filtered pod list) that the cache already holds — an object at the resourceVersion kept, a
// whole list at the resourceVersion of its complete record — is not teed at all: the writer
// would write nothing. A newer one is teed as before, and so is a streamed answer.
func TestTeeSkipsWhatTheCacheHolds(t *testing.T) {
	s := openStore(t)
	m := newManager(s)
	pod := func(rv string) string {
		return `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"default","resourceVersion":"` + rv + `"},"spec":{"nodeName":"n"}}`
	}
	list := func(rv string) string {
		return `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"` + rv + `"},"items":[` + pod("5") + `]}`
	}
	respond(t, m, "GET", "/api/v1/namespaces/default/pods/a", "kubelet", []byte(pod("5")))
	respond(t, m, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn", "kubelet", []byte(list("9")))
	tee := func(url, body string) bool {
		r, _ := http.NewRequest("GET", "http://hub"+url, nil)
		r.Header.Set("User-Agent", "kubelet/v1")
		ri, err := wire.ParseRequest(r)
		if err != nil {
			t.Fatal(err)
		}
		resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {wire.MediaJSON}}, Body: wire.NewWhole([]byte(body))}
		tb := m.Tee(ri, "kubelet", resp)
		if tb != nil {
			tb.Close() // cut short: nothing recorded
			if err := m.Writer.Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		return tb != nil
	}
	for _, c := range []struct {
		url, body string
		teed      bool
	}{
		{"/api/v1/namespaces/default/pods/a", pod("5"), false},
		{"/api/v1/namespaces/default/pods/a", pod("6"), true},
		{"/api/v1/pods?fieldSelector=spec.nodeName%3Dn", list("9"), false},
		{"/api/v1/pods?fieldSelector=spec.nodeName%3Dn", list("10"), true},
		{"/api/v1/pods?fieldSelector=spec.nodeName%3Dn&continue=x", list("9"), true}, // a page: never the whole list
		{"/api/v1/pods", list("9"), true},                                            // another scope
	} {
		if got := tee(c.url, c.body); got != c.teed {
			t.Errorf("%s rv %s: teed %v, want %v", c.url, c.body[strings.Index(c.body, `"resourceVersion":"`)+19:][:2], got, c.teed)
		}
	}
}

// While the writer still holds something of the resource not yet written (an object waiting out
// Delay, a drop not yet marked on disk), the store does not say what the cache will hold: the
// answer is teed as before, in its order behind what is queued.
func TestTeeSkipsOnlyWhenTheWriterIsSettled(t *testing.T) {
	s := openStore(t)
	m := newManager(s)
	pod := func(name, rv string) string {
		return `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"` + name + `","namespace":"default","resourceVersion":"` + rv + `"}}`
	}
	respond(t, m, "GET", "/api/v1/namespaces/default/pods/a", "kubelet", []byte(pod("a", "5")))
	m.Writer.Delay = time.Hour // b stays pending in the writer
	r, _ := http.NewRequest("GET", "http://hub/api/v1/namespaces/default/pods/b", nil)
	r.Header.Set("User-Agent", "kubelet/v1")
	ri, _ := wire.ParseRequest(r)
	tb := m.Tee(ri, "kubelet", &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {wire.MediaJSON}}, Body: wire.NewWhole([]byte(pod("b", "7")))})
	_, _ = io.Copy(io.Discard, tb)
	tb.Close()
	ra, _ := http.NewRequest("GET", "http://hub/api/v1/namespaces/default/pods/a", nil)
	ra.Header.Set("User-Agent", "kubelet/v1")
	ria, _ := wire.ParseRequest(ra)
	if tb := m.Tee(ria, "kubelet", &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {wire.MediaJSON}}, Body: wire.NewWhole([]byte(pod("a", "5")))}); tb == nil {
		t.Fatal("skipped while the writer holds an object of the resource not yet written")
	} else {
		tb.Close()
	}
}

// A re-list whose resourceVersion moved on (anything in the cluster changed) mostly brings the
// objects the cache holds at the very resourceVersion it holds them: such an item is only seen
// (the list's reconcile keeps it), not read further nor queued to be written; a newer one is.
func TestRelistItemHeldIsOnlySeen(t *testing.T) {
	s := openStore(t)
	m := newManager(s)
	pod := func(name, rv string) string {
		return `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"` + name + `","namespace":"default","resourceVersion":"` + rv + `"}}`
	}
	respond(t, m, "GET", "/api/v1/namespaces/default/pods/a", "kubelet", []byte(pod("a", "5")))
	r := Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}
	b := newBatch(m.Writer, r)
	st := &Stream{w: m.Writer, r: r, kind: StreamList, media: wire.ParseMediaType(wire.MediaJSON), seen: map[string]bool{}}
	for _, raw := range []string{pod("a", "5"), pod("b", "3")} {
		if err := b.put(st, []byte(raw)); err != nil {
			t.Fatal(err)
		}
	}
	if !st.seen["default/a"] || !st.seen["default/b"] {
		t.Fatalf("seen %v", st.seen)
	}
	if _, ok := b.pending["default/a"]; ok || b.pending["default/b"] == nil {
		t.Fatalf("pending %v: want b alone", b.order)
	}
}
