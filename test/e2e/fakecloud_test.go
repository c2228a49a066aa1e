package e2e

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"
)

// fakeCloud is a broken proxy in front of the real apiserver: it passes every request through
// (with the admin's credentials) unless the test's tamper function answers it with what a real
// apiserver never sends — malformed, endless, compressed into a bomb, cut or reset. While down it
// is a black hole: requests are accepted and never answered.
type fakeCloud struct {
	URL   string
	srv   *httptest.Server
	down  atomic.Bool
	done  chan struct{} // closed when the test ends: black-holed requests end
	mu    sync.Mutex
	tamp  func(w http.ResponseWriter, r *http.Request) bool
	proxy *httputil.ReverseProxy
}

func newFakeCloud(t *testing.T) *fakeCloud {
	t.Helper()
	certFile, keyFile, err := cluster.PKI.Issue("fake-cloud", "fake-cloud", nil, []net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(cluster.APIServers[0].URL)
	rt, err := rest.TransportFor(cluster.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	fc := &fakeCloud{done: make(chan struct{}), proxy: &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.Out.Host = target.Host },
		Transport:     rt,
		FlushInterval: -1,
		ErrorLog:      nil,
	}}
	fc.srv = httptest.NewUnstartedServer(http.HandlerFunc(fc.serve))
	fc.srv.EnableHTTP2 = true
	fc.srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	fc.srv.Config.ErrorLog = nil
	fc.srv.StartTLS()
	fc.URL = fc.srv.URL
	t.Cleanup(func() {
		close(fc.done)
		fc.srv.CloseClientConnections()
		fc.srv.Close()
	})
	return fc
}

func (fc *fakeCloud) serve(w http.ResponseWriter, r *http.Request) {
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

// tamper sets what the fake answers by itself (nil: pass everything through).
func (fc *fakeCloud) tamper(f func(w http.ResponseWriter, r *http.Request) bool) {
	fc.mu.Lock()
	fc.tamp = f
	fc.mu.Unlock()
}

// hijack takes the connection of an HTTP/1.1 request (the hub sends gets and lists that way) to
// write raw bytes: a body cut short of its length, a reset.
func hijack(w http.ResponseWriter) (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		return nil, nil, fmt.Errorf("not HTTP/1.1")
	}
	return hj.Hijack()
}

// reset closes a TCP connection with an RST.
func reset(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		if nc, ok := tc.NetConn().(*net.TCPConn); ok {
			nc.SetLinger(0)
		}
	}
	c.Close()
}

// procStatus returns a /proc/<pid>/status field in KiB (VmRSS, VmHWM) or as a number (Threads).
func procStatus(pid int, field string) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == field+":" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return -1
}

// openFDs counts a process's open file descriptors.
func openFDs(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}
