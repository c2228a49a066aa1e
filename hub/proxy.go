package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"time"

	"nodehub/hub/remote"
	"nodehub/wire"
)

type requestKey struct{}

// serveProxy handles every request on the proxy port: the node lease from the hub's copy,
// everything else forwarded to a healthy cloud server.
func (s *Server) serveProxy(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ri, err := wire.ParseRequest(r)
	if err != nil {
		wire.WriteStatus(w, wire.NegotiateAccept(r.Header.Get("Accept")), http.StatusBadRequest, err.Error())
		return
	}
	s.metrics.inflightGauge.Add(1)
	rec := &recorder{ResponseWriter: w}
	defer func() {
		s.metrics.inflightGauge.Add(-1)
		s.metrics.request(ri, rec.code(), time.Since(start))
	}()

	id := identityOf(r)
	if id == remote.Node && s.lease.Owns(ri) {
		s.lease.ServeHTTP(rec, r, ri)
		return
	}
	if id == remote.Node {
		if err := s.cfg.Credentials.Err(); err != nil {
			wire.WriteStatus(rec, ri.Accept, http.StatusServiceUnavailable, "nodehub: "+err.Error())
			return
		}
	}
	if !s.balancer.Healthy() {
		wire.WriteStatus(rec, ri.Accept, http.StatusServiceUnavailable, "nodehub: no healthy cloud server")
		return
	}
	route := remote.Route{Identity: id, Stream: ri.Verb == wire.VerbWatch}
	ctx := context.WithValue(remote.WithRoute(r.Context(), route), requestKey{}, ri)
	s.proxy.ServeHTTP(rec, r.WithContext(ctx))
}

// identityOf decides which credentials a request is forwarded with: the node's certificate only
// for a request without credentials of its own that came over loopback; anything else keeps its
// own (a bearer token, or none).
func identityOf(r *http.Request) remote.Identity {
	if r.Header.Get("Authorization") != "" || r.TLS != nil {
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
		},
		Transport: s.balancer,
		// Zero: a streamed response (a watch, or any body without Content-Length) is flushed after
		// every write, so events reach the client as soon as they arrive; a sized body is not.
		FlushInterval: 0,
		BufferPool:    bufferPool{},
		ErrorLog:      log.New(io.Discard, "", 0),
		ModifyResponse: func(resp *http.Response) error {
			ri, _ := resp.Request.Context().Value(requestKey{}).(*wire.RequestInfo)
			if ri == nil || resp.StatusCode == http.StatusSwitchingProtocols {
				return nil
			}
			resp.Body = &countingBody{ReadCloser: resp.Body, add: s.metrics.cloudBytesFunc(ri)}
			if s.cache != nil {
				if tee := s.cache.Tee(ri, cacheOwner(ri, resp.Request), resp); tee != nil {
					resp.Body = tee
				}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client went away; nothing to answer
			}
			ri, _ := r.Context().Value(requestKey{}).(*wire.RequestInfo)
			accept := wire.MediaType{Type: wire.MediaJSON}
			if ri != nil {
				accept = ri.Accept
			}
			s.log.Debug("proxy: upstream failed", "path", r.URL.Path, "err", err)
			msg := fmt.Sprintf("nodehub: cloud unreachable: %v", err)
			if errors.Is(err, remote.ErrNoHealthyBackend) {
				msg = "nodehub: no healthy cloud server"
			}
			if rec, ok := w.(*recorder); ok && rec.status != 0 {
				return // headers already went out (a watch cut mid-stream): just end it
			}
			wire.WriteStatus(w, accept, http.StatusServiceUnavailable, msg)
		},
	}
}

// cacheOwner names whose cache a response goes to: the component for requests made with the
// node's identity, component@<hash of the credential> for requests that brought their own, so
// nothing cached for one credential is read back for another.
func cacheOwner(ri *wire.RequestInfo, r *http.Request) string {
	if remote.RouteOf(r.Context()).Identity == remote.Node {
		return ri.Component
	}
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return ri.Component + "@anonymous"
	}
	sum := sha256.Sum256([]byte(auth))
	return ri.Component + "@" + hex.EncodeToString(sum[:8])
}

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
