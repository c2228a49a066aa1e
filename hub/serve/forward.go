package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"sync"
	"time"

	"nodehub/hub/remote"
	"nodehub/hub/tokens"
	"nodehub/wire"
)

// forward is step 6 of the pipeline (proxy.go): the request goes to a healthy cloud server
// through the ReverseProxy, whose hooks are the rest of the step: Rewrite (the node's requests
// lose the headers that speak for someone else), the transport (the balancer, as q.route says),
// ModifyResponse (respond) and ErrorHandler (fallback).
func (p *Pipeline) forward(q *proxyRequest) {
	ri := q.ri
	if q.id == remote.Node {
		if err := p.Creds.Err(); err != nil {
			wire.WriteStatus(q.w, ri.Accept, http.StatusServiceUnavailable, "nodehub: "+err.Error())
			return
		}
	}
	q.route = remote.Route{Identity: q.id, Stream: ri.Verb == wire.VerbWatch}
	if q.local != nil && (ri.Verb == wire.VerbGet || ri.Verb == wire.VerbList) {
		// A read the cache can answer does not wait on a black-holed link.
		q.route.HeaderTimeout = p.HeaderTimeout
		if t := time.Duration(ri.TimeoutSeconds) * time.Second / 2; t > 0 && t < q.route.HeaderTimeout {
			q.route.HeaderTimeout = t // leave the client time to get the cached answer
		}
		q.route.OnSlow = func() bool { return p.Local.CanAnswer(q.r, q.local) }
	}
	stop := context.AfterFunc(p.Cloud.OnlinePeriod(), q.cancel) // going offline ends it
	q.onEnd(func() { stop() })
	if q.local != nil && p.Local.AnswersWrite(q.local) {
		q.kept = peekBody(q.r)
		if q.kept != nil && isTokenRequest(ri) {
			q.caller = tokens.Caller(q.id == remote.Node, q.r.Header.Get("Authorization"))
		}
	}
	if done := p.Fix.SendingWrite(ri, q.id == remote.Node); done != nil {
		q.onEnd(done)
	}
	p.proxy.ServeHTTP(q.w, q.r.WithContext(context.WithValue(q.ctx, requestKey{}, q)))
}

func (p *Pipeline) newReverseProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// The balancer sets scheme and host; the path and query go as the client sent them.
			pr.Out.Host = ""
			q := requestOf(pr.In.Context())
			if q != nil && q.id == remote.Node {
				stripIdentityHeaders(pr.Out.Header)
			}
			if q != nil {
				askWithoutCBOR(q.ri, pr.Out.Header) // cbor.go
			}
		},
		Transport: balancerTransport{p.Balancer},
		// Zero: a streamed response (a watch, or any body without Content-Length) is flushed after
		// every write, so events reach the client as soon as they arrive; a sized body is not.
		FlushInterval: 0,
		BufferPool:    bufferPool{},
		// What the ReverseProxy logs itself (a body cut mid-copy: a watch the cloud ended
		// abruptly) goes to the hub's log at debug, as the servers' errors do.
		ErrorLog:       slog.NewLogLogger(p.Log.Handler(), slog.LevelDebug),
		ModifyResponse: p.respond,
		ErrorHandler:   p.fallback,
	}
}

// balancerTransport sends a forwarded request through the balancer as its proxyRequest's route
// says.
type balancerTransport struct{ b *remote.Balancer }

// RoundTrip implements http.RoundTripper.
func (t balancerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var route remote.Route // Passthrough: no request gets the node's identity unless it says so
	if q := requestOf(req.Context()); q != nil {
		route = q.route
	}
	return t.b.Send(route, req)
}

// fallback answers a forwarded request that got no answer from the cloud (ErrorHandler): 408 when
// its body did not arrive in time; from the cache for a read (and for a watch once the cloud is
// gone); the offline answer to a write the offline proxy answers (writefallback.go); else a 503
// Status.
func (p *Pipeline) fallback(w http.ResponseWriter, r *http.Request, err error) {
	q := requestOf(r.Context())
	if q != nil && q.body != nil && q.body.expired() {
		// The server cancelled the request when the body's deadline passed; the client still
		// reads the answer.
		wire.WriteStatus(w, q.ri.Accept, http.StatusRequestTimeout, "nodehub: the request body was not received in time")
		return
	}
	if q == nil || q.r.Context().Err() != nil {
		return // the client went away; nothing to answer
	}
	if rec, ok := w.(*recorder); ok && rec.status != 0 {
		return // headers already went out (a watch cut mid-stream): just end it
	}
	p.Log.Debug("proxy: upstream failed", "path", r.URL.Path, "err", err)
	v := q.ri.Verb
	if q.local != nil && (v == wire.VerbGet || v == wire.VerbList || v == wire.VerbWatch && !p.Cloud.Online()) {
		p.Metrics.Offline(v)
		p.Local.ServeHTTP(w, q.r, q.local)
		return
	}
	if p.writeFallback(w, q) {
		return
	}
	msg := fmt.Sprintf("nodehub: cloud unreachable: %v", err)
	if errors.Is(err, remote.ErrNoHealthyBackend) {
		msg = "nodehub: no healthy cloud server"
	}
	wire.WriteStatus(w, q.ri.Accept, http.StatusServiceUnavailable, msg)
}

// bufferPool recycles the proxy's copy buffers (32 KiB each) instead of allocating one per request.
type bufferPool struct{}

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *copyBuffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { copyBuffers.Put(&b) }
