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

// errNotAPI marks a 5xx answer that is not the apiserver's own (a load balancer in front of it):
// for a read, the cache answers instead.
var errNotAPI = errors.New("nodehub: the cloud answered with a 5xx that is not an API Status")

// errThrottled: the apiserver answered a read 429 Too Many Requests; the cache answers it instead
// of sending the client back to retry against an apiserver that asked for less.
var errThrottled = errors.New("nodehub: the cloud answered 429 Too Many Requests")

// respond is step 6 on the cloud's answer (ReverseProxy.ModifyResponse), before any byte of it
// reaches the client, in this order: a read's 5xx that is not the apiserver's own goes to
// fallback; the bytes are counted; a token request's answer is kept (tokens.go); the filters
// rewrite it (filter.go); kubelet's GET of its node and the events of a watch of it get the
// Autonomy condition (hub/autonomy); who a new bearer token is, is asked of the server that
// answered (review.go); the answer is teed into its owner's cache (keep.go).
func (p *Pipeline) respond(resp *http.Response) error {
	q := requestOf(resp.Request.Context())
	if q == nil || resp.StatusCode == http.StatusSwitchingProtocols {
		return nil
	}
	ri := q.ri
	if resp.StatusCode >= 500 && q.local != nil && (ri.Verb == wire.VerbGet || ri.Verb == wire.VerbList) && !isAPIStatus(resp) {
		return errNotAPI
	}
	if resp.StatusCode == http.StatusTooManyRequests && q.local != nil && (ri.Verb == wire.VerbGet || ri.Verb == wire.VerbList) && p.Local.CanAnswer(q.r, q.local) {
		return errThrottled // the apiserver sheds load: the cache answers meanwhile
	}
	resp.Body = &wire.CountingBody{ReadCloser: resp.Body, Count: p.Metrics.CloudBytes(ri)}
	gunzipWatch(ri, resp)
	if q.caller != "" {
		p.recordToken(q, resp)
	}
	if q.chain != nil && resp.StatusCode == http.StatusOK {
		p.filter(q.chain, ri, resp)
	}
	if req := resp.Request; req != nil && req.ContentLength > 0 {
		p.Metrics.Purpose("proxied", "sent")(int(req.ContentLength))
	}
	if q.id == remote.Node && q.chain == nil {
		switch {
		case p.isOwnNodeGet(ri):
			p.node.fromGet(resp) // the cloud's own bytes, before the condition is set
		case p.isOwnNodeWatch(ri):
			p.node.track(resp)
		}
	}
	if p.Auto != nil && q.local != nil && q.id == remote.Node {
		// Before the cache: it keeps what kubelet received. After the node copy: it keeps the
		// cloud's bytes.
		switch {
		case p.isOwnNodeGet(ri):
			p.Auto.Response(resp)
		case p.isOwnNodeWatch(ri):
			p.Auto.WatchResponse(resp, p.NodeName) // kubelet's informer (v1.37 reads its node there)
		}
	}
	if q.local == nil {
		return nil // no cache
	}
	p.Fix.WriteAnswered(ri, q.id == remote.Node, resp)
	Keep(p.Cache, ri, p.learn(q, resp), resp)
	return nil
}

// learn returns the owner a cloud answer is cached for: the request's own credential's
// (hub/identity), once the server that answered said who a bearer token the hub did not know is
// (a resource's 2xx asks it, review.go): a ServiceAccount's token reads and writes that
// ServiceAccount's cache from then on. An answer's status alone vouches for no one.
func (p *Pipeline) learn(q *proxyRequest, resp *http.Response) string {
	if q.cred.Hash == "" {
		return q.local.Own // the node's identity, or no credential
	}
	if resp.StatusCode/100 == 2 && q.ri.IsResource && q.cred.Bearer && !p.IDs.Vouched(q.cred) {
		p.IDs.Learn(q.ctx, q.cred, p.askWho(resp.Request))
	}
	return p.IDs.OwnerOf(ownerComponent(q.ri), q.cred)
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

// isAPIStatus reports whether an error answer comes from the apiserver (a Status in JSON or
// protobuf) rather than from something in front of it.
func isAPIStatus(resp *http.Response) bool {
	t := wire.ParseMediaType(resp.Header.Get("Content-Type")).Type
	return t == wire.MediaJSON || t == wire.MediaProtobuf
}

// bufferPool recycles the proxy's copy buffers (32 KiB each) instead of allocating one per request.
type bufferPool struct{}

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *copyBuffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { copyBuffers.Put(&b) }
