package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"time"

	"nodehub/hub/local"
	"nodehub/hub/remote"
	"nodehub/hub/tokens"
	"nodehub/wire"
)

type requestKey struct{}

// proxied is what the proxy's hooks need to know about a forwarded request.
type proxied struct {
	ri     *wire.RequestInfo
	client context.Context // the client's own context (the forwarded one also ends when going offline)
	local  *local.Request  // nil when caching is off
	cred   credential      // the request's own credential (zero for the node's identity)
	body   *timedBody      // the request body under its deadline, nil without one
	node   bool            // forwarded with the node's identity

	// kept is the body of a write the offline proxy can answer, to answer it locally when the
	// cloud gives no answer (writefallback.go); caller is set for a token request whose answer
	// is kept (tokens.go).
	kept   []byte
	caller string
}

// serveProxy handles every request on the proxy port: the node lease from the hub's copy; with the
// cloud unreachable, everything from the cache; otherwise forwarded to a healthy cloud server,
// with reads falling back to the cache when the server fails before answering.
func (s *Server) serveProxy(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ri, err := wire.ParseRequest(r)
	if err != nil {
		wire.WriteStatus(w, wire.NegotiateAccept(r.Header.Get("Accept")), http.StatusBadRequest, err.Error())
		return
	}
	s.metrics.inflight(ri, 1)
	rec := &recorder{ResponseWriter: w}
	defer func() {
		s.metrics.inflight(ri, -1)
		s.metrics.request(ri, rec.code(), time.Since(start))
	}()

	if max := int64(s.cfg.MaxInFlight); max > 0 && ri.Verb != wire.VerbWatch && !isUpgrade(r, ri) {
		// The node's own clients and everyone else have a budget each: pods cannot starve kubelet.
		budget, who := &s.inflightOthers, "others"
		if isNodeClient(r) {
			budget, who = &s.inflightNode, "node"
		}
		n := budget.Add(1)
		defer budget.Add(-1)
		if n > max {
			s.metrics.throttled.Inc(who)
			closeUnread(rec, r)
			rec.Header().Set("Retry-After", "1")
			wire.WriteStatus(rec, ri.Accept, http.StatusTooManyRequests, "nodehub: too many requests in flight; try again")
			return
		}
	}
	body := s.limitBody(w, r, ri)
	id := identityOf(r)
	if id == remote.Node && s.lease.Owns(ri) {
		s.lease.ServeHTTP(rec, r, ri)
		return
	}
	if id == remote.Node {
		if st := s.pool.Store(ri); st != nil {
			// Pool-scope lists and watches come from the shared store, online or not.
			s.servePool(rec, r, ri, st)
			return
		}
	}
	var lreq *local.Request
	var cred credential
	if s.local != nil {
		var own string
		own, cred = s.cacheOwner(ri, r, id)
		lreq = &local.Request{Info: ri, Own: own, Shared: id == remote.Node}
		if st := s.state.get(); st == remote.Unhealthy || st == remote.Unknown && s.coldRead(r, lreq) {
			s.metrics.offline.Inc(verbLabel(ri.Verb))
			s.local.ServeHTTP(rec, r, lreq)
			return
		}
	} else if s.state.get() == remote.Unhealthy {
		wire.WriteStatus(rec, ri.Accept, http.StatusServiceUnavailable, "nodehub: no healthy cloud server")
		return
	}
	if id == remote.Node {
		if err := s.cfg.Credentials.Err(); err != nil {
			wire.WriteStatus(rec, ri.Accept, http.StatusServiceUnavailable, "nodehub: "+err.Error())
			return
		}
	}
	route := remote.Route{Identity: id, Stream: ri.Verb == wire.VerbWatch}
	if lreq != nil && (ri.Verb == wire.VerbGet || ri.Verb == wire.VerbList) {
		// A read the cache can answer does not wait on a black-holed link.
		route.HeaderTimeout = s.cfg.HeartbeatTimeout
		if t := time.Duration(ri.TimeoutSeconds) * time.Second / 2; t > 0 && t < route.HeaderTimeout {
			route.HeaderTimeout = t // leave the client time to get the cached answer
		}
		route.OnSlow = func() bool { return s.local.CanAnswer(r, lreq) }
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.state.onlinePeriod(), cancel) // going offline ends it
	defer stop()
	if ri.Verb == wire.VerbWatch {
		if c := s.filters.For(ri); c != nil && c.Uses("servicetopology") {
			// A topology change ends the watch: the client re-lists and gets re-filtered slices.
			stopTopo := context.AfterFunc(s.topo.Changes(), cancel)
			defer stopTopo()
		}
	}
	px := &proxied{ri: ri, client: r.Context(), local: lreq, cred: cred, body: body, node: id == remote.Node}
	if lreq != nil && s.local.AnswersWrite(ri) {
		px.kept = peekBody(r)
		if px.kept != nil && isTokenRequest(ri) {
			px.caller = tokens.Caller(lreq.Shared, r.Header.Get("Authorization"))
		}
	}
	ctx = context.WithValue(remote.WithRoute(ctx, route), requestKey{}, px)
	s.proxy.ServeHTTP(rec, r.WithContext(ctx))
}

// suspectAfter is how long a forwarded request waits for its answer before the server is probed
// at once (see remote.Balancer.SuspectAfter): with a probe's timeout of 2 s, a black-holed link is
// noticed within 2.5 s of a client's first request into it.
const suspectAfter = 500 * time.Millisecond

// coldRead reports whether a request made before the first probe's verdict is a read the cache
// answers: it waits a moment for the verdict (see cloudState.settle), then is served from the
// cache unless the cloud turned out reachable. Writes and what the cache cannot answer go to the
// cloud.
func (s *Server) coldRead(r *http.Request, lreq *local.Request) bool {
	v := lreq.Info.Verb
	if v != wire.VerbGet && v != wire.VerbList || !s.local.CanAnswer(r, lreq) {
		return false
	}
	return s.state.settle(r.Context()) != remote.Healthy
}

// errNotAPI marks a 5xx answer that is not the apiserver's own (a load balancer in front of it):
// for a read, the cache answers instead.
var errNotAPI = errors.New("nodehub: the cloud answered with a 5xx that is not an API Status")

// identityOf decides which credentials a request is forwarded with: the node's certificate only
// for a request without credentials of its own that came over loopback; anything else keeps its
// own (a bearer token, or none).
func identityOf(r *http.Request) remote.Identity {
	if r.Header.Get("Authorization") != "" || r.TLS != nil || r.Context().Value(untrustedKey{}) != nil {
		return remote.Passthrough
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return remote.Passthrough
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return remote.Node
	}
	return remote.Passthrough
}

func (s *Server) newReverseProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// The balancer sets scheme and host; the path and query go as the client sent them.
			pr.Out.Host = ""
			if px, _ := pr.In.Context().Value(requestKey{}).(*proxied); px != nil && px.node {
				stripIdentityHeaders(pr.Out.Header)
			}
		},
		Transport: s.balancer,
		// Zero: a streamed response (a watch, or any body without Content-Length) is flushed after
		// every write, so events reach the client as soon as they arrive; a sized body is not.
		FlushInterval: 0,
		BufferPool:    bufferPool{},
		ErrorLog:      log.New(io.Discard, "", 0),
		ModifyResponse: func(resp *http.Response) error {
			px, _ := resp.Request.Context().Value(requestKey{}).(*proxied)
			if px == nil || resp.StatusCode == http.StatusSwitchingProtocols {
				return nil
			}
			ri := px.ri
			if resp.StatusCode >= 500 && px.local != nil && (ri.Verb == wire.VerbGet || ri.Verb == wire.VerbList) && !isAPIStatus(resp) {
				return errNotAPI
			}
			resp.Body = &countingBody{ReadCloser: resp.Body, add: s.metrics.cloudBytesFunc(ri)}
			if px.caller != "" {
				s.recordToken(px, resp)
			}
			if chain := s.filters.For(ri); chain != nil && resp.StatusCode == http.StatusOK {
				s.filter(chain, ri, resp)
			}
			if s.auto != nil && px.local != nil && px.local.Shared && s.isOwnNodeGet(ri) {
				s.autonomyResponse(resp) // before the cache: it keeps what kubelet received
			}
			if s.cache == nil {
				return nil
			}
			if px.cred.sa != "" && resp.StatusCode/100 == 2 {
				// The cloud accepted the token: from now on it reads and writes its
				// ServiceAccount's cache.
				s.ids.learn(px.cred.hash, px.cred.sa)
				px.local.Own = ownerComponent(ri) + "@" + px.cred.sa
			}
			var tee io.ReadCloser
			if ri.IsResource {
				tee = s.cache.Tee(ri, px.local.Own, resp)
			} else if ri.Verb == wire.VerbGet {
				tee = s.cache.TeeDiscovery(resp.Request.URL.Path, resp)
			}
			if tee != nil {
				resp.Body = tee
			}
			return nil
		},
		ErrorHandler: s.proxyError,
	}
}

// proxyError answers a forwarded request that got no answer from the cloud: from the cache for a
// read (and for a watch once the cloud is gone), else with a 503 Status.
func (s *Server) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	px, _ := r.Context().Value(requestKey{}).(*proxied)
	if px != nil && px.body != nil && px.body.expired() {
		// The server cancelled the request when the body's deadline passed; the client still
		// reads the answer.
		wire.WriteStatus(w, px.ri.Accept, http.StatusRequestTimeout, "nodehub: the request body was not received in time")
		return
	}
	if px == nil || px.client.Err() != nil {
		return // the client went away; nothing to answer
	}
	if rec, ok := w.(*recorder); ok && rec.status != 0 {
		return // headers already went out (a watch cut mid-stream): just end it
	}
	s.log.Debug("proxy: upstream failed", "path", r.URL.Path, "err", err)
	v := px.ri.Verb
	if px.local != nil && (v == wire.VerbGet || v == wire.VerbList || v == wire.VerbWatch && !s.balancer.Healthy()) {
		s.metrics.offline.Inc(verbLabel(v))
		s.local.ServeHTTP(w, r.WithContext(px.client), px.local)
		return
	}
	if s.writeFallback(w, r, px) {
		return
	}
	msg := fmt.Sprintf("nodehub: cloud unreachable: %v", err)
	if errors.Is(err, remote.ErrNoHealthyBackend) {
		msg = "nodehub: no healthy cloud server"
	}
	wire.WriteStatus(w, px.ri.Accept, http.StatusServiceUnavailable, msg)
}

// isAPIStatus reports whether an error answer comes from the apiserver (a Status in JSON or
// protobuf) rather than from something in front of it.
func isAPIStatus(resp *http.Response) bool {
	t := wire.ParseMediaType(resp.Header.Get("Content-Type")).Type
	return t == wire.MediaJSON || t == wire.MediaProtobuf
}

// cacheOwner names whose cache a request reads and its response goes to: the component for
// requests made with the node's identity; for requests that brought their own credential,
// component@<hash of its ServiceAccount> once the cloud accepted the token, else
// component@<hash of the credential> (see identity.go), so nothing cached for one identity is
// read back for another.
func (s *Server) cacheOwner(ri *wire.RequestInfo, r *http.Request, id remote.Identity) (string, credential) {
	comp := ownerComponent(ri)
	if id == remote.Node {
		return comp, credential{}
	}
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return comp + "@anonymous", credential{}
	}
	c := credentialOf(auth)
	if sa := s.ids.owner(c.hash); sa != "" && sa == c.sa {
		return comp + "@" + sa, c
	}
	return comp + "@" + c.hash, c
}

// ownerComponent is the component part of a cache owner's name. "@" separates a component from a
// credential there: a User-Agent may not carry one, or a local client could name a pod's cache as
// its own.
func ownerComponent(ri *wire.RequestInfo) string { return strings.ReplaceAll(ri.Component, "@", "_") }

// recorder remembers the status code; Unwrap lets http.ResponseController reach Flush and Hijack.
type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(p)
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) code() int {
	if r.status == 0 {
		return http.StatusOK
	}
	return r.status
}

// countingBody counts the bytes read from the cloud.
type countingBody struct {
	io.ReadCloser
	add func(n int)
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	if n > 0 {
		c.add(n)
	}
	return n, err
}

// bufferPool recycles the proxy's copy buffers (32 KiB each) instead of allocating one per request.
type bufferPool struct{}

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *copyBuffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { copyBuffers.Put(&b) }
