package serve

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"nodehub/hub/local"
	"nodehub/wire"
)

// A get's answer of a small announced length is read whole before the cache's tee, which then
// tells from its resourceVersion alone that it holds it already (a plain client's GET of the node
// every few seconds is not copied into the writer's queue each time); a larger or unannounced
// answer, or a list, streams as it came.
func TestKeepReadsASmallGetWhole(t *testing.T) {
	p := &Pipeline{}
	answer := func(verb string, length int64) *http.Response {
		q := &proxyRequest{ri: &wire.RequestInfo{IsResource: true, Verb: verb, Version: "v1", Resource: "nodes", Name: "a"}, local: &local.Request{Own: "x"}}
		body := bytes.Repeat([]byte("x"), 100)
		resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, ContentLength: length, Body: io.NopCloser(bytes.NewReader(body))}
		p.keep(q, resp)
		return resp
	}
	if _, ok := answer(wire.VerbGet, 100).Body.(*wire.Whole); !ok {
		t.Error("a small get's answer is not held whole")
	}
	for _, r := range []*http.Response{answer(wire.VerbGet, -1), answer(wire.VerbList, 100)} {
		if _, ok := r.Body.(*wire.Whole); ok {
			t.Error("an unannounced get or a list was read whole")
		}
	}
}
