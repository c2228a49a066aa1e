package cache

import (
	"net/http"
	"strings"
	"testing"

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
			tb.Close()
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
