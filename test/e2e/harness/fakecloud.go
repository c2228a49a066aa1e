package harness

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"

	"k8s.io/client-go/rest"
)

// FakeCloud is a broken proxy in front of the real apiserver: it passes every request through
// (with the admin's credentials) unless the Tamper function answers it with what a real
// apiserver never sends — malformed, endless, compressed into a bomb, cut or reset. While down
// it is a black hole: requests are accepted and never answered. Its serving certificate is
// signed by the cluster CA, so a hub trusts it as it trusts the apiserver.
type FakeCloud struct {
	URL   string
	srv   *httptest.Server
	down  atomic.Bool
	done  chan struct{} // closed by Close: black-holed requests end
	mu    sync.Mutex
	tamp  func(w http.ResponseWriter, r *http.Request) bool
	proxy *httputil.ReverseProxy
}

// NewFakeCloud starts a fake cloud in front of the cluster's first apiserver.
func (c *Cluster) NewFakeCloud() (*FakeCloud, error) {
	certFile, keyFile, err := c.PKI.Issue("fake-cloud", "fake-cloud", nil, []net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"})
	if err != nil {
		return nil, err
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	target, _ := url.Parse(c.APIServers[0].URL)
	rt, err := rest.TransportFor(c.AdminConfig)
	if err != nil {
		return nil, err
	}
	fc := &FakeCloud{done: make(chan struct{}), proxy: &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.Out.Host = target.Host },
		Transport:     rt,
		FlushInterval: -1,
	}}
	fc.srv = httptest.NewUnstartedServer(http.HandlerFunc(fc.serve))
	fc.srv.EnableHTTP2 = true
	fc.srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	fc.srv.StartTLS()
	fc.URL = fc.srv.URL
	return fc, nil
}

func (fc *FakeCloud) serve(w http.ResponseWriter, r *http.Request) {
	if fc.down.Load() {
		select { // a black hole: no answer, ever
		case <-r.Context().Done():
		case <-fc.done:
		}
		return
	}
	fc.mu.Lock()
	tamper := fc.tamp
	fc.mu.Unlock()
	if tamper != nil && tamper(w, r) {
		return
	}
	fc.proxy.ServeHTTP(w, r)
}

// Tamper sets what the fake answers by itself: f returns true for a request it answered (nil:
// pass everything through).
func (fc *FakeCloud) Tamper(f func(w http.ResponseWriter, r *http.Request) bool) {
	fc.mu.Lock()
	fc.tamp = f
	fc.mu.Unlock()
}

// SetDown black-holes the fake (true) or lets it answer again.
func (fc *FakeCloud) SetDown(down bool) { fc.down.Store(down) }

// Close ends black-holed requests and stops the server.
func (fc *FakeCloud) Close() {
	close(fc.done)
	fc.srv.CloseClientConnections()
	fc.srv.Close()
}

// GzipBomb compresses head, n zeros and tail: a few dozen KiB that inflate to n bytes.
func GzipBomb(head string, n int, tail string) []byte {
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	zw.Write([]byte(head))
	zeros := bytes.Repeat([]byte{'0'}, 1<<20)
	for i := 0; i < n; i += len(zeros) {
		zw.Write(zeros)
	}
	zw.Write([]byte(tail))
	zw.Close()
	return b.Bytes()
}

// NodeGet sends a GET through a hub's proxy port with the node's identity (no credentials, over
// loopback) as component ua ("<ua>/v1.0"), asking for accept and encoding when set, and leaves the
// body compressed as it came.
func NodeGet(ctx context.Context, proxy, ua, path, accept, encoding string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, proxy+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", ua+"/v1.0")
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if encoding != "" {
		req.Header.Set("Accept-Encoding", encoding)
	}
	return (&http.Client{Transport: &http.Transport{DisableCompression: true}}).Do(req)
}
