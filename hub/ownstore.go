package hub

import (
	"io"
	"net/http"
	"sync"

	"nodehub/pool"
	"nodehub/wire"
)

// fromStore answers one of the hub's own lists or watches of a pool-scope resource (the topology
// source's services) from the shared store, as the node's clients are answered: the store already
// holds what the cloud (or the pool's leader) sent, so the hub reads nothing twice — and after an
// outage, the hub's own readers resume from the store instead of listing the cloud again.
func fromStore(req *http.Request, ri *wire.RequestInfo, st *pool.Store) *http.Response {
	sv := pool.Serving{Info: ri}
	if ri.Verb != wire.VerbWatch {
		rec := &recordedResponse{header: http.Header{}, code: http.StatusOK}
		st.ServeList(rec, sv)
		return rec.response(req)
	}
	pr, pw := io.Pipe()
	w := &pipeResponse{header: http.Header{}, pw: pw, ready: make(chan struct{})}
	go func() { // owned by the request: it ends with req's context or when the reader closes
		st.ServeWatch(w, req, sv)
		w.WriteHeader(http.StatusOK) // in case nothing was written
		pw.Close()
	}()
	<-w.ready
	return &http.Response{StatusCode: w.code, Status: http.StatusText(w.code), Header: w.header, Body: pr, ContentLength: -1, Request: req}
}

// pipeResponse is an http.ResponseWriter whose body goes into a pipe, for fromStore's watches.
type pipeResponse struct {
	header http.Header
	pw     *io.PipeWriter
	code   int
	once   sync.Once
	ready  chan struct{} // closed at WriteHeader
}

func (p *pipeResponse) Header() http.Header { return p.header }

func (p *pipeResponse) WriteHeader(code int) {
	p.once.Do(func() {
		p.code = code
		close(p.ready)
	})
}

func (p *pipeResponse) Write(b []byte) (int, error) {
	p.WriteHeader(http.StatusOK)
	return p.pw.Write(b)
}

// Flush implements http.Flusher: a pipe holds nothing back.
func (p *pipeResponse) Flush() {}
