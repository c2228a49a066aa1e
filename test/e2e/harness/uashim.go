package harness

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

// UAShim is a loopback HTTP proxy in front of nodehub's plain proxy port that replaces every
// request's User-Agent with a fixed one. kubemark's hollow node hard-codes "hollow-kubelet" and
// "hollow-proxy"; the shim makes it send what the real kubelet and kube-proxy send, so nodehub's
// cache policy and filters apply to it as they do in production. Everything else passes as it is:
// bodies and watches stream through, no X-Forwarded-For is added, and when nodehub cannot be
// reached the client's connection is dropped (as a refused or reset connection would be), not
// answered with a 502 nodehub never sends.
type UAShim struct {
	// URL is the shim's address, the server a kubeconfig names.
	URL string

	srv *http.Server
	ln  net.Listener
}

// NewUAShim starts a shim on a free loopback port forwarding to target (nodehub's proxy URL).
func NewUAShim(target, userAgent string) (*UAShim, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		DisableCompression:  true, // the client's own Accept-Encoding passes through unchanged
		MaxIdleConnsPerHost: 32,
		IdleConnTimeout:     90 * time.Second,
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.Header.Set("User-Agent", userAgent)
		},
		Transport:     tr,
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0), // streams cut by a restart or an outage are expected
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			panic(http.ErrAbortHandler) // drop the client's connection: nodehub is not there
		},
	}
	s := &UAShim{URL: "http://" + ln.Addr().String(), ln: ln,
		srv: &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}}
	go func() { _ = s.srv.Serve(ln) }() // returns when Close closes the listener
	return s, nil
}

// Close stops the shim and drops its connections.
func (s *UAShim) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	_ = s.srv.Close()
}
