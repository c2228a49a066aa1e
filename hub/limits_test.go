package hub

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"nodehub/internal/certtest"
)

// nodeCreds are loaded credentials for a plain-HTTP fake cloud.
type nodeCreds struct{}

func (nodeCreds) CAPool() *x509.CertPool { return x509.NewCertPool() }
func (nodeCreds) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return &tls.Certificate{}, nil
}
func (nodeCreds) Err() error { return nil }

// cloudStub is a fake upstream (only for what these unit tests need: a request that waits, and
// the headers it got).
type cloudStub struct {
	release chan struct{}
	once    sync.Once
	mu      sync.Mutex
	headers []http.Header
}

// Release answers the requests to /slow held so far and every later one at once.
func (c *cloudStub) Release() { c.once.Do(func() { close(c.release) }) }

func newCloudStub(t *testing.T) (*cloudStub, string) {
	c := &cloudStub{release: make(chan struct{})}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		c.mu.Lock()
		c.headers = append(c.headers, r.Header.Clone())
		c.mu.Unlock()
		if strings.Contains(r.URL.Path, "/slow") {
			<-c.release // held as long as the test needs, however slowly it runs
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"x"}}`)
	}))
	t.Cleanup(func() { c.Release(); ts.Close() })
	return c, ts.URL
}

func selfSigned(t *testing.T) *tls.Certificate {
	return certtest.SelfSignedTLS(t, &x509.Certificate{IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}})
}

// runHub starts a hub on loopback ports against cloud; it returns the proxy, hub API and secure
// addresses.
func runHub(t *testing.T, cfg Config) (*Server, string, string, string) {
	t.Helper()
	cfg.NodeName = "n"
	cfg.ProxyAddr, cfg.HubAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.HeartbeatInterval, cfg.HeartbeatTimeout, cfg.HeartbeatFailed, cfg.HeartbeatHealthy = time.Hour, 2*time.Second, 100, 1
	cfg.Credentials = nodeCreds{}
	cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	cert := selfSigned(t)
	cfg.SecureAddrs = []string{"127.0.0.1:0"}
	cfg.ServingCert = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert, nil }
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for deadline := time.Now().Add(30 * time.Second); (len(s.Addrs()) < 2 || len(s.SecureAddrs()) < 1) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if len(s.Addrs()) < 2 || len(s.SecureAddrs()) < 1 {
		t.Fatal("hub did not listen")
	}
	return s, s.Addrs()[0].String(), s.Addrs()[1].String(), s.SecureAddrs()[0].String()
}

// A request line plus headers past MaxHeaderBytes gets 431 on every port, before any handler.
func TestHeadersAreBoundedOnEveryPort(t *testing.T) {
	_, cloud := newCloudStub(t)
	_, proxy, hubAPI, secure := runHub(t, Config{Servers: []string{cloud}})
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 10 * time.Second}
	for _, url := range []string{"http://" + proxy + "/api/v1/namespaces/default/configmaps/x", "http://" + hubAPI + "/v1/healthz", "https://" + secure + "/api/v1/namespaces/default/configmaps/x"} {
		for _, ua := range []string{"app/1.0", strings.Repeat("u", 100<<10)} {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			req.Header.Set("User-Agent", ua)
			req.Header.Set("Authorization", "Bearer tok")
			resp, err := insecure.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", url, err)
			}
			resp.Body.Close()
			want := http.StatusOK
			if len(ua) > MaxHeaderBytes {
				want = http.StatusRequestHeaderFieldsTooLarge
			}
			if resp.StatusCode != want {
				t.Errorf("%s with a %d-byte User-Agent: %d, want %d", url, len(ua), resp.StatusCode, want)
			}
		}
	}
}

func serveOn(s *Server, method, path, remote string, header http.Header) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = remote
	for k, v := range header {
		r.Header[k] = v
	}
	if host, _, _ := net.SplitHostPort(remote); net.ParseIP(host).IsLoopback() {
		r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 10261}))
	}
	w := httptest.NewRecorder()
	s.pipe.ServeHTTP(w, r)
	return w
}

// An Upgrade header does not escape the in-flight limit (only pods' exec, attach and portforward
// upgrades do), and the node's own clients have a budget pods cannot take.
func TestInFlightCountsFakeUpgradesAndKeepsTheNodesBudget(t *testing.T) {
	c, cloud := newCloudStub(t)
	s, err := New(Config{NodeName: "n", Servers: []string{cloud}, Credentials: nodeCreds{}, MaxInFlight: 1, HeartbeatTimeout: 2 * time.Second,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	pod := http.Header{"Authorization": {"Bearer pod-token"}}
	started := make(chan struct{})
	held := make(chan int)
	go func() {
		close(started)
		held <- serveOn(s, http.MethodGet, "/api/v1/namespaces/default/configmaps/slow", "10.0.0.7:5000", pod).Code
	}()
	<-started
	for deadline := time.Now().Add(30 * time.Second); othersInFlight(s) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	upgrade := http.Header{"Authorization": {"Bearer pod-token"}, "Upgrade": {"x"}, "Connection": {"Upgrade"}}
	if code := serveOn(s, http.MethodGet, "/api/v1/namespaces/default/configmaps/y", "10.0.0.7:5001", upgrade).Code; code != http.StatusTooManyRequests {
		t.Errorf("a pod's request with Upgrade: x while its budget is used: %d, want 429", code)
	}
	if code := serveOn(s, http.MethodGet, "/api/v1/namespaces/default/configmaps/y", "10.0.0.7:5002", pod).Code; code != http.StatusTooManyRequests {
		t.Errorf("a pod's second request: %d, want 429", code)
	}
	if code := serveOn(s, http.MethodGet, "/api/v1/namespaces/default/configmaps/y", "127.0.0.1:5003", nil).Code; code != http.StatusOK {
		t.Errorf("kubelet while pods use their budget: %d, want 200", code)
	}
	exec := http.Header{"Authorization": {"Bearer pod-token"}, "Upgrade": {"SPDY/3.1"}, "Connection": {"Upgrade"}}
	if code := serveOn(s, http.MethodPost, "/api/v1/namespaces/default/pods/p/exec?command=sh", "10.0.0.7:5004", exec).Code; code == http.StatusTooManyRequests {
		t.Errorf("exec upgrade counted against the limit")
	}
	c.Release()
	if code := <-held; code != http.StatusOK {
		t.Errorf("held request: %d", code)
	}
}

// A body that trickles in is cut at the body deadline (408) and frees its in-flight slot.
func TestTricklingBodyIsCutAndFreesItsSlot(t *testing.T) {
	c, cloud := newCloudStub(t)
	s, proxy, _, _ := runHub(t, Config{Servers: []string{cloud}, MaxInFlight: 1, BodyTimeout: 300 * time.Millisecond})
	conn, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: hub\r\nAuthorization: Bearer t\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
	start := time.Now()
	go func() { // one byte every 100 ms: never done (1000 bytes announced)
		for i := 0; i < 200; i++ {
			time.Sleep(100 * time.Millisecond)
			if _, err := conn.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	// The answer must come well before DefaultBodyTimeout (what an ignored BodyTimeout would
	// give), however late past 300 ms a loaded machine delivers it.
	bound := DefaultBodyTimeout - 2*time.Second
	_ = conn.SetReadDeadline(time.Now().Add(bound))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a trickling body within %v: %v", bound, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || time.Since(start) > bound {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("trickling body: %d %s after %v, want 408 soon after 300ms", resp.StatusCode, b, time.Since(start))
	}
	for deadline := time.Now().Add(30 * time.Second); allInFlight(s) != 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := allInFlight(s); n != 0 {
		t.Fatalf("%d in flight after the cut", n)
	}
	// A body sent at once goes through, and the connection is not cut afterwards by the deadline:
	// the answer comes after more than the body deadline.
	time.AfterFunc(3*time.Second, c.Release)
	resp, err = http.Post("http://"+proxy+"/api/v1/namespaces/default/configmaps/slow", "application/json", strings.NewReader(`{"kind":"ConfigMap"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a slow answer after a quick body: %d", resp.StatusCode)
	}
}

// The hub API answers only loopback, health and readiness excepted (/metrics with RemoteMetrics).
func TestHubAPIAnswersOnlyLoopback(t *testing.T) {
	for _, remoteMetrics := range []bool{false, true} {
		s, err := New(Config{NodeName: "n", Servers: []string{"http://127.0.0.1:1"}, Credentials: nodeCreds{}, RemoteMetrics: remoteMetrics,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		mux := s.hubMux()
		for _, tc := range []struct {
			method, path string
			open         bool
		}{
			{"GET", "/v1/healthz", true}, {"GET", "/v1/readyz", true}, {"GET", "/metrics", remoteMetrics},
			{"DELETE", "/v1/cache/kubelet", false}, {"POST", "/v1/token", false}, {"GET", "/pods", false},
			{"POST", "/openyurt.io/v1/namespaces/default/pods/p/upgrade", false}, {"GET", "/debug/pprof/heap", false},
		} {
			for _, from := range []string{"10.0.0.7:4000", "127.0.0.1:4000"} {
				r := httptest.NewRequest(tc.method, tc.path, strings.NewReader("abcdef.0123456789abcdef"))
				r.RemoteAddr = from
				if from[:3] == "127" {
					r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 10267}))
				} else {
					r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 10267}))
				}
				w := httptest.NewRecorder()
				mux.ServeHTTP(w, r)
				refused := w.Code == http.StatusForbidden
				if want := from[:3] != "127" && !tc.open; refused != want {
					t.Errorf("remote metrics %v: %s %s from %s: %d", remoteMetrics, tc.method, tc.path, from, w.Code)
				}
			}
		}
	}
}

// Headers that speak for someone else never go out with the node's identity; a pod's own token
// keeps them (the apiserver authorizes them against the pod's ServiceAccount).
func TestImpersonationHeadersStrippedFromNodeRequests(t *testing.T) {
	c, cloud := newCloudStub(t)
	s, err := New(Config{NodeName: "n", Servers: []string{cloud}, Credentials: nodeCreds{}, HeartbeatTimeout: 2 * time.Second,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	forged := http.Header{"Impersonate-User": {"system:admin"}, "Impersonate-Group": {"system:masters"}, "Impersonate-Extra-Scopes": {"x"},
		"X-Remote-User": {"admin"}, "X-Remote-Group": {"system:masters"}, "X-Remote-Extra-Foo": {"bar"}}
	if code := serveOn(s, http.MethodGet, "/api/v1/namespaces/default/configmaps/x", "127.0.0.1:5000", forged).Code; code != http.StatusOK {
		t.Fatalf("node request: %d", code)
	}
	withToken := forged.Clone()
	withToken.Set("Authorization", "Bearer pod")
	if code := serveOn(s, http.MethodGet, "/api/v1/namespaces/default/configmaps/x", "10.0.0.7:5000", withToken).Code; code != http.StatusOK {
		t.Fatalf("pod request: %d", code)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.headers) != 2 {
		t.Fatalf("%d requests reached the cloud", len(c.headers))
	}
	for k := range forged {
		if c.headers[0].Get(k) != "" {
			t.Errorf("%s forwarded with the node's identity", k)
		}
		if c.headers[1].Get(k) == "" {
			t.Errorf("%s dropped from a pod's own request", k)
		}
	}
}

// A request refused for the in-flight limit is answered at once, whatever its body is doing.
func TestThrottledBodyIsNotWaitedFor(t *testing.T) {
	c, cloud := newCloudStub(t)
	s, proxy, _, _ := runHub(t, Config{Servers: []string{cloud}, MaxInFlight: 1})
	// Released before the hub stops (its stop would wait for the held request).
	defer c.Release()
	go func() { // holds the node's one slot
		resp, err := http.Get("http://" + proxy + "/api/v1/namespaces/default/configmaps/slow")
		if err == nil {
			resp.Body.Close()
		}
	}()
	for deadline := time.Now().Add(30 * time.Second); nodeInFlight(s) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	conn, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: hub\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
	// Well before DefaultBodyTimeout, when a hub that waited for the body would answer.
	_ = conn.SetReadDeadline(time.Now().Add(DefaultBodyTimeout - 2*time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no 429 while the body is unsent: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("%d, want 429", resp.StatusCode)
	}
}

func nodeInFlight(s *Server) int64   { n, _ := s.pipe.InFlight(); return n }
func othersInFlight(s *Server) int64 { _, o := s.pipe.InFlight(); return o }
func allInFlight(s *Server) int64    { n, o := s.pipe.InFlight(); return n + o }
