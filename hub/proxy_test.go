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
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"nodehub/cache"
	"nodehub/filter"
	"nodehub/hub/remote"
	"nodehub/hub/serve"
	"nodehub/internal/certtest"
	"nodehub/pool"
	"nodehub/wire"
)

func filterConfig() filter.Config {
	return filter.Config{Enabled: true, MasterServiceHost: "169.254.2.1", MasterServicePort: 10268, NodeName: "node-a"}
}

// Unit tests of the proxy port (the pipeline, pipeline.ServeHTTP), with no control plane: a fake
// cloud (an httptest TLS server that asks for a client certificate) stands in for the
// kube-apiserver, the hub's cache is a temporary directory, and the hub's notion of the cloud's
// reachability is set by the test. The e2e tests (test/e2e proxy_test, offline_test, cache_test,
// identity_test) check the same paths against the real kube-apiserver.

const (
	podWeb      = `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web","namespace":"default","uid":"u1","resourceVersion":"5"},"spec":{"nodeName":"node-a"}}`
	podList     = `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[` + podWeb + `]}`
	kubelet     = "kubelet/v1.30.0 (linux/amd64) kubernetes/abcdef"
	tokenAsk    = `{"kind":"TokenRequest","apiVersion":"authentication.k8s.io/v1","spec":{"audiences":["api"],"expirationSeconds":3600}}`
	tokenAnswer = `{"kind":"TokenRequest","apiVersion":"authentication.k8s.io/v1","metadata":{"name":"app","namespace":"default"},"spec":{"audiences":["api"],"expirationSeconds":3600},"status":{"token":"the-issued-token","expirationTimestamp":"2099-01-01T00:00:00Z"}}`
	svcKube     = `{"kind":"Service","apiVersion":"v1","metadata":{"name":"kubernetes","namespace":"default","uid":"u2","resourceVersion":"3"},"spec":{"clusterIP":"10.96.0.1","clusterIPs":["10.96.0.1"],"ports":[{"name":"https","protocol":"TCP","port":443,"targetPort":6443}]}}`
)

// seen is one request as the fake cloud received it.
type seen struct {
	method, uri, auth, ua string
	cert                  bool // a client certificate was presented: the node's identity
}

// fakeCloud answers a pod get, a pod list and a pod watch (events sent by the test), a
// configmap create, and blocks the path /api/v1/namespaces/default/pods/slow until released.
type fakeCloud struct {
	srv        *httptest.Server
	events     chan string   // watch events to send, one line each
	nodeEvents chan string   // node watch events to send
	slow       chan struct{} // closed to release the slow get
	inSlow     chan struct{} // a slow get arrived

	mu       sync.Mutex
	reqs     []seen
	fail     string // when set, every answer is a 502 of this content type
	throttle bool   // every answer is the apiserver's 429 with Retry-After
	// handle, when set, answers first; false leaves the request to the answers above.
	handle func(w http.ResponseWriter, r *http.Request) bool
	// users: who a SelfSubjectReview says a bearer token is (else 401); the reviews are kept
	// apart from reqs (reviewed).
	users   map[string]string
	reviews []seen
}

func newFakeCloud(t testing.TB) *fakeCloud {
	t.Helper()
	c := &fakeCloud{events: make(chan string), nodeEvents: make(chan string), slow: make(chan struct{}), inSlow: make(chan struct{}, 8)}
	c.srv = httptest.NewUnstartedServer(http.HandlerFunc(c.serve))
	c.srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	c.srv.StartTLS()
	t.Cleanup(func() {
		c.srv.CloseClientConnections()
		c.srv.Close()
	})
	return c
}

func (c *fakeCloud) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == serve.ReviewPath {
		c.review(w, r)
		return
	}
	c.mu.Lock()
	c.reqs = append(c.reqs, seen{r.Method, r.URL.RequestURI(), r.Header.Get("Authorization"), r.Header.Get("User-Agent"), r.TLS != nil && len(r.TLS.PeerCertificates) > 0})
	fail, throttle, handle := c.fail, c.throttle, c.handle
	c.mu.Unlock()
	if handle != nil && handle(w, r) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	switch {
	case throttle:
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","code":429}`)
	case fail != "":
		w.Header().Set("Content-Type", fail)
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":502}`)
	case r.URL.Path == "/api/v1/namespaces/default/pods/slow":
		c.inSlow <- struct{}{}
		select {
		case <-c.slow:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, podWeb)
	case r.URL.Path == "/api/v1/namespaces/default/serviceaccounts/app/token" && r.Method == http.MethodPost:
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, tokenAnswer)
	case r.URL.Path == "/api/v1/services" && r.URL.Query().Get("watch") != "":
		w.WriteHeader(http.StatusOK)
		if r.URL.Query().Get("sendInitialEvents") == "true" { // a watch-list: the list as events
			_, _ = io.WriteString(w, `{"type":"ADDED","object":`+svcKube+`}`+"\n"+
				`{"type":"BOOKMARK","object":{"kind":"Service","apiVersion":"v1","metadata":{"resourceVersion":"4","annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n")
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	case r.URL.Path == "/api/v1/services":
		_, _ = io.WriteString(w, `{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"4"},"items":[`+svcKube+`]}`)
	case r.URL.Path == "/api/v1/namespaces/default/services/kubernetes":
		_, _ = io.WriteString(w, svcKube)
	case r.URL.Path == "/api/v1/namespaces/default/pods/web" && r.Method == http.MethodGet:
		_, _ = io.WriteString(w, podWeb)
	case r.URL.Path == "/api/v1/pods" && r.URL.Query().Get("watch") != "":
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for {
			select {
			case ev := <-c.events:
				_, _ = io.WriteString(w, ev+"\n")
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	case r.URL.Path == "/api/v1/pods":
		_, _ = io.WriteString(w, podList)
	case r.URL.Path == "/api/v1/nodes/node-a" && r.Method == http.MethodGet:
		_, _ = io.WriteString(w, nodeA(5, "v1"))
	case r.URL.Path == "/api/v1/nodes" && r.URL.Query().Get("watch") != "":
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for {
			select {
			case ev := <-c.nodeEvents:
				_, _ = io.WriteString(w, ev+"\n")
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	case r.URL.Path == "/api/v1/namespaces/default/configmaps" && r.Method == http.MethodPost:
		w.WriteHeader(http.StatusCreated)
		_, _ = io.Copy(w, r.Body)
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":404,"reason":"NotFound"}`)
	}
}

// review answers a SelfSubjectReview as the apiserver does: who the bearer token of the
// Authorization header is, per users; system:anonymous without one; else 401.
func (c *fakeCloud) review(w http.ResponseWriter, r *http.Request) {
	auth := r.Header.Get("Authorization")
	c.mu.Lock()
	c.reviews = append(c.reviews, seen{r.Method, r.URL.RequestURI(), auth, r.Header.Get("User-Agent"), r.TLS != nil && len(r.TLS.PeerCertificates) > 0})
	tok, bearer := wire.BearerToken(auth)
	user, ok := c.users[tok]
	c.mu.Unlock()
	group := "system:authenticated"
	if !bearer {
		user, ok, group = "system:anonymous", true, "system:unauthenticated"
	}
	w.Header().Set("Content-Type", "application/json")
	if !ok {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Unauthorized","code":401}`)
		return
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = fmt.Fprintf(w, `{"kind":"SelfSubjectReview","apiVersion":"authentication.k8s.io/v1","metadata":{},"status":{"userInfo":{"username":%q,"groups":[%q]}}}`, user, group)
}

// vouch makes the fake cloud's reviews say that bearer token tok is user.
func (c *fakeCloud) vouch(tok, user string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.users == nil {
		c.users = map[string]string{}
	}
	c.users[tok] = user
}

// reviewed returns the reviews received since the last call.
func (c *fakeCloud) reviewed() []seen {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.reviews
	c.reviews = nil
	return out
}

// took returns the requests received since the last call (but reviews: reviewed).
func (c *fakeCloud) took() []seen {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.reqs
	c.reqs = nil
	return out
}

// tlsNodeCreds are the node's credentials for the fake cloud: its CA, and a self-signed client
// certificate for system:node:node-a.
type tlsNodeCreds struct {
	ca   *x509.CertPool
	cert tls.Certificate
}

func newTLSNodeCreds(t testing.TB, cloud *httptest.Server) *tlsNodeCreds {
	t.Helper()
	ca := x509.NewCertPool()
	ca.AddCert(cloud.Certificate())
	return &tlsNodeCreds{ca: ca, cert: *certtest.SelfSignedTLS(t, certtest.NodeClient("node-a"))}
}

func (n *tlsNodeCreds) CAPool() *x509.CertPool { return n.ca }
func (n *tlsNodeCreds) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return &n.cert, nil
}
func (n *tlsNodeCreds) Err() error { return nil }

// proxyFixture is a hub (not running: its proxy handler is served by an httptest server on
// loopback) in front of a fake cloud, with a cache in a temporary directory.
type proxyFixture struct {
	cloud *fakeCloud
	hub   *Server
	url   string // the proxy port
}

func newProxyFixture(t testing.TB, adjust func(*Config)) *proxyFixture {
	t.Helper()
	cloud := newFakeCloud(t)
	cfg := Config{
		NodeName: "node-a", Servers: []string{cloud.srv.URL}, Credentials: newTLSNodeCreds(t, cloud.srv),
		CacheDir: t.TempDir(), CachePolicy: cache.Policy{Agents: []string{"*"}},
		Log: slog.New(slog.DiscardHandler),
	}
	if adjust != nil {
		adjust(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.state.set(remote.Healthy) // as if the first heartbeat had answered
	front := httptest.NewServer(s.pipe)
	t.Cleanup(func() {
		front.CloseClientConnections()
		front.Close()
		if s.cache != nil {
			_ = s.cache.Writer.Close(context.Background())
			_ = s.cache.Store.Close()
		}
	})
	return &proxyFixture{cloud: cloud, hub: s, url: front.URL}
}

// offline makes the hub see the cloud as unreachable, with the cache's writes done.
func (f *proxyFixture) offline(t *testing.T) {
	t.Helper()
	if f.hub.cache != nil {
		if err := f.hub.cache.Writer.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	f.hub.state.set(remote.Unhealthy)
}

// runPool runs the hub's pool until the test ends and waits until its shared store of services
// has synced; the context returned ends with the test.
func (f *proxyFixture) runPool(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.hub.pool.Run(ctx, context.Background) }()
	t.Cleanup(func() { cancel(); <-done })
	ri := &wire.RequestInfo{IsResource: true, Verb: wire.VerbList, Version: "v1", Resource: "services"}
	for deadline := time.Now().Add(30 * time.Second); f.hub.pool.Store(ri) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the shared store did not sync")
		}
	}
	return ctx
}

type answer struct {
	code   int
	header http.Header
	body   string
}

// do sends one request to the proxy port as the User-Agent ua, with the Authorization header auth
// when not empty (a PATCH as a JSON merge patch).
func (f *proxyFixture) do(t *testing.T, method, path, ua, auth, body string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, f.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("User-Agent", ua)
	req.Header.Set("Accept", "application/json")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if method == http.MethodPatch {
		req.Header.Set("Content-Type", "application/merge-patch+json")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, string(data)}
}

func paths(reqs []seen) []string {
	var out []string
	for _, r := range reqs {
		out = append(out, r.method+" "+r.uri)
	}
	return out
}

// Online, a get and a list of the node's clients reach the cloud with the node's certificate and
// come back as the cloud's bytes.
func TestProxyOnlinePassesReadsThrough(t *testing.T) {
	f := newProxyFixture(t, nil)
	if a := f.do(t, http.MethodGet, "/api/v1/namespaces/default/pods/web", kubelet, "", ""); a.code != http.StatusOK || a.body != podWeb {
		t.Fatalf("get: %d %s", a.code, a.body)
	}
	if a := f.do(t, http.MethodGet, "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a", kubelet, "", ""); a.code != http.StatusOK || a.body != podList {
		t.Fatalf("list: %d %s", a.code, a.body)
	}
	got := f.cloud.took()
	if !slices.Equal(paths(got), []string{"GET /api/v1/namespaces/default/pods/web", "GET /api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a"}) {
		t.Fatalf("the cloud got %v", paths(got))
	}
	for _, r := range got {
		if !r.cert || r.auth != "" {
			t.Errorf("%s %s: client certificate %v, Authorization %q; want the node's identity", r.method, r.uri, r.cert, r.auth)
		}
	}
}

// A watch streams: each event reaches the client as the cloud sends it, before the watch ends.
func TestProxyOnlineStreamsWatchEvents(t *testing.T) {
	f := newProxyFixture(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.url+"/api/v1/pods?watch=true&resourceVersion=7", nil)
	req.Header.Set("User-Agent", kubelet)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("watch: %d", resp.StatusCode)
	}
	lines := bufio.NewReader(resp.Body)
	for i, rv := range []string{"8", "9"} {
		ev := `{"type":"MODIFIED","object":` + strings.Replace(podWeb, `"resourceVersion":"5"`, `"resourceVersion":"`+rv+`"`, 1) + `}`
		f.cloud.events <- ev
		line, err := lines.ReadString('\n')
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if strings.TrimSpace(line) != ev {
			t.Fatalf("event %d: got %s, want the cloud's %s", i, line, ev)
		}
	}
}

// Offline, reads are answered from what the cache kept of the online answers, and the cloud is
// not asked.
func TestProxyOfflineAnswersFromTheCache(t *testing.T) {
	f := newProxyFixture(t, nil)
	f.do(t, http.MethodGet, "/api/v1/namespaces/default/pods/web", kubelet, "", "")
	f.do(t, http.MethodGet, "/api/v1/pods", kubelet, "", "")
	f.cloud.took()
	f.offline(t)

	if a := f.do(t, http.MethodGet, "/api/v1/namespaces/default/pods/web", kubelet, "", ""); a.code != http.StatusOK || !strings.Contains(a.body, `"name":"web"`) {
		t.Fatalf("offline get: %d %s", a.code, a.body)
	}
	a := f.do(t, http.MethodGet, "/api/v1/pods", kubelet, "", "")
	if a.code != http.StatusOK || !strings.Contains(a.body, `"kind":"PodList"`) || !strings.Contains(a.body, `"name":"web"`) {
		t.Fatalf("offline list: %d %s", a.code, a.body)
	}
	if a := f.do(t, http.MethodGet, "/api/v1/namespaces/default/pods/gone", kubelet, "", ""); a.code != http.StatusNotFound {
		t.Fatalf("offline get of what was never cached: %d %s", a.code, a.body)
	}
	// kube-proxy, another node client, reads what kubelet cached.
	if a := f.do(t, http.MethodGet, "/api/v1/namespaces/default/pods/web", "kube-proxy/v1.30.0", "", ""); a.code != http.StatusOK {
		t.Fatalf("offline get by another node client: %d %s", a.code, a.body)
	}
	if got := f.cloud.took(); len(got) != 0 {
		t.Fatalf("offline, the cloud got %v", paths(got))
	}
}

// Offline, writes the cache cannot answer are refused with a Status, and the cloud is not asked.
func TestProxyOfflineRefusesWrites(t *testing.T) {
	f := newProxyFixture(t, nil)
	f.offline(t)
	cm := `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c","namespace":"default"}}`
	for _, tt := range []struct {
		method, path, body string
		code               int
	}{
		{http.MethodPost, "/api/v1/namespaces/default/configmaps", cm, http.StatusServiceUnavailable},
		{http.MethodPut, "/api/v1/namespaces/default/configmaps/c", cm, http.StatusServiceUnavailable},
		{http.MethodDelete, "/api/v1/namespaces/default/configmaps/c", "", http.StatusForbidden},
	} {
		a := f.do(t, tt.method, tt.path, kubelet, "", tt.body)
		if a.code != tt.code || !strings.Contains(a.body, `"kind":"Status"`) || !strings.Contains(a.body, "unreachable") {
			t.Errorf("offline %s %s: %d %s, want %d with a Status", tt.method, tt.path, a.code, a.body, tt.code)
		}
	}
	if got := f.cloud.took(); len(got) != 0 {
		t.Fatalf("offline, the cloud got %v", paths(got))
	}
}

// A request with a token of its own goes with that token and without the node's certificate, and
// what is cached for it is its own: offline it does not read the node's cache, nor the node
// its.
func TestProxyTokenRequestsKeepTheirOwnIdentityAndCache(t *testing.T) {
	f := newProxyFixture(t, nil)
	const tok = "Bearer some-token"
	f.do(t, http.MethodGet, "/api/v1/pods", kubelet, "", "")
	if a := f.do(t, http.MethodPost, "/api/v1/namespaces/default/configmaps", kubelet, "", `{"metadata":{"name":"c"}}`); a.code != http.StatusCreated {
		t.Fatalf("write online: %d %s", a.code, a.body)
	}
	if got := f.cloud.took(); len(got) != 2 || !got[0].cert || !got[1].cert || got[0].auth+got[1].auth != "" {
		t.Fatalf("the node's requests reached the cloud as %+v", got)
	}
	f.offline(t)
	if a := f.do(t, http.MethodGet, "/api/v1/namespaces/default/pods/web", "app/1.0", tok, ""); a.code != http.StatusNotFound {
		t.Fatalf("offline, a token request read the node's cached pod: %d %s", a.code, a.body)
	}
	if a := f.do(t, http.MethodGet, "/api/v1/pods", "app/1.0", tok, ""); a.code == http.StatusOK {
		t.Fatalf("offline, a token request read the node's cached list: %d %s", a.code, a.body)
	}

	f.hub.state.set(remote.Healthy)
	if a := f.do(t, http.MethodGet, "/api/v1/pods", "app/1.0", tok, ""); a.code != http.StatusOK {
		t.Fatalf("token list: %d %s", a.code, a.body)
	}
	if got := f.cloud.took(); len(got) != 1 || got[0].cert || got[0].auth != tok {
		t.Fatalf("the token request reached the cloud as %+v; want its token and no client certificate", got)
	}
	f.offline(t)
	if a := f.do(t, http.MethodGet, "/api/v1/pods", "app/1.0", tok, ""); a.code != http.StatusOK || !strings.Contains(a.body, `"name":"web"`) {
		t.Fatalf("offline, the token's own cached list: %d %s", a.code, a.body)
	}
	if a := f.do(t, http.MethodGet, "/api/v1/pods", "app/1.0", "Bearer another-token", ""); a.code == http.StatusOK {
		t.Fatalf("offline, another token read the first one's list: %d %s", a.code, a.body)
	}
}

// A request that did not arrive over loopback never gets the node's identity: without a token of
// its own it is refused before anything else.
func TestProxyLendsTheNodesIdentityOnlyOverLoopback(t *testing.T) {
	f := newProxyFixture(t, nil)
	h := f.hub.pipe
	for _, auth := range []string{"", "Bearer a-token"} {
		r := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/default/pods/web", nil)
		r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(169, 254, 2, 1), Port: 10261}))
		r.RemoteAddr = "169.254.2.7:40000"
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		got := f.cloud.took()
		switch {
		case auth == "" && (w.Code != http.StatusUnauthorized || len(got) != 0):
			t.Errorf("no token, not loopback: %d, the cloud got %v; want 401 and nothing sent", w.Code, paths(got))
		case auth != "" && (w.Code != http.StatusOK || len(got) != 1 || got[0].cert || got[0].auth != auth):
			t.Errorf("a token, not loopback: %d, the cloud got %+v; want its token only", w.Code, got)
		}
	}
}

// Past MaxInFlight short requests the hub answers 429 with Retry-After at once; watches do not
// count.
func TestProxyThrottlesShortRequestsPastMaxInFlight(t *testing.T) {
	f := newProxyFixture(t, func(c *Config) { c.MaxInFlight = 1 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.url+"/api/v1/pods?watch=true", nil)
	wresp, err := http.DefaultClient.Do(watch)
	if err != nil {
		t.Fatal(err)
	}
	defer wresp.Body.Close()

	done := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, f.url+"/api/v1/namespaces/default/pods/slow", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- answer{}
			return
		}
		resp.Body.Close()
		done <- answer{code: resp.StatusCode}
	}()
	<-f.cloud.inSlow
	a := f.do(t, http.MethodGet, "/api/v1/namespaces/default/pods/web", kubelet, "", "")
	if a.code != http.StatusTooManyRequests || a.header.Get("Retry-After") == "" {
		t.Fatalf("second short request in flight: %d (Retry-After %q), want 429 with Retry-After", a.code, a.header.Get("Retry-After"))
	}
	close(f.cloud.slow)
	if a := <-done; a.code != http.StatusOK {
		t.Fatalf("the slow request: %d", a.code)
	}
	if a := f.do(t, http.MethodGet, "/api/v1/namespaces/default/pods/web", kubelet, "", ""); a.code != http.StatusOK {
		t.Fatalf("after the slow request ended: %d", a.code)
	}
}

// A read the cloud fails before answering is answered from the cache; a write gets a 503 Status.
func TestProxyCloudFailureFallsBackToTheCacheForReads(t *testing.T) {
	f := newProxyFixture(t, nil)
	f.do(t, http.MethodGet, "/api/v1/namespaces/default/pods/web", kubelet, "", "")
	if err := f.hub.cache.Writer.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.cloud.srv.CloseClientConnections()
	f.cloud.srv.Close() // refused from now on; the hub still believes the cloud online
	if a := f.do(t, http.MethodGet, "/api/v1/namespaces/default/pods/web", kubelet, "", ""); a.code != http.StatusOK || !strings.Contains(a.body, `"name":"web"`) {
		t.Fatalf("read with the cloud failing: %d %s", a.code, a.body)
	}
	a := f.do(t, http.MethodPost, "/api/v1/namespaces/default/configmaps", kubelet, "", `{"metadata":{"name":"c"}}`)
	if a.code != http.StatusServiceUnavailable || !strings.Contains(a.body, `"kind":"Status"`) {
		t.Fatalf("write with the cloud failing: %d %s", a.code, a.body)
	}
}

// Without a cache, offline requests get a 503 Status.
func TestProxyWithoutCacheOffline(t *testing.T) {
	f := newProxyFixture(t, func(c *Config) { c.CacheDir = "" })
	f.offline(t)
	if a := f.do(t, http.MethodGet, "/api/v1/namespaces/default/pods/web", kubelet, "", ""); a.code != http.StatusServiceUnavailable || !strings.Contains(a.body, `"kind":"Status"`) {
		t.Fatalf("no cache, no healthy server: %d %s", a.code, a.body)
	}
	if got := f.cloud.took(); len(got) != 0 {
		t.Fatalf("offline, the cloud got %v", paths(got))
	}
}

// The filters rewrite what their components receive (masterservice points kubelet's
// default/kubernetes at the hub), the cache keeps the filtered answer (offline kubelet gets the
// same), and other components get the cloud's bytes.
func TestProxyFiltersTheAnswerAndCachesItFiltered(t *testing.T) {
	f := newProxyFixture(t, func(c *Config) {
		c.Filters = filterConfig()
	})
	const path = "/api/v1/namespaces/default/services/kubernetes"
	online := f.do(t, http.MethodGet, path, kubelet, "", "")
	if online.code != http.StatusOK || !strings.Contains(online.body, `"clusterIP":"169.254.2.1"`) || !strings.Contains(online.body, `"port":10268`) {
		t.Fatalf("kubelet's service online: %d %s", online.code, online.body)
	}
	if online.header.Get("Content-Length") != strconv.Itoa(len(online.body)) {
		t.Fatalf("Content-Length %q for a body of %d bytes", online.header.Get("Content-Length"), len(online.body))
	}
	if a := f.do(t, http.MethodGet, path, "kube-proxy/v1.30.0", "", ""); a.body != svcKube {
		t.Fatalf("kube-proxy's service: %s, want the cloud's bytes", a.body)
	}
	f.offline(t)
	if a := f.do(t, http.MethodGet, path, kubelet, "", ""); a.code != http.StatusOK || !strings.Contains(a.body, `"clusterIP":"169.254.2.1"`) {
		t.Fatalf("kubelet's service offline: %d %s", a.code, a.body)
	}
}

// A 5xx from something in front of the apiserver (not an API Status) makes the cache answer a
// read; the apiserver's own 5xx Status reaches the client.
func TestProxyNonAPIServerErrorFallsBackToTheCache(t *testing.T) {
	f := newProxyFixture(t, nil)
	f.do(t, http.MethodGet, "/api/v1/namespaces/default/pods/web", kubelet, "", "")
	if err := f.hub.cache.Writer.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.cloud.mu.Lock()
	f.cloud.fail = "text/html"
	f.cloud.mu.Unlock()
	if a := f.do(t, http.MethodGet, "/api/v1/namespaces/default/pods/web", kubelet, "", ""); a.code != http.StatusOK || !strings.Contains(a.body, `"name":"web"`) {
		t.Fatalf("a load balancer's 502: %d %s, want the cached pod", a.code, a.body)
	}
	f.cloud.mu.Lock()
	f.cloud.fail = "application/json"
	f.cloud.mu.Unlock()
	if a := f.do(t, http.MethodGet, "/api/v1/namespaces/default/pods/web", kubelet, "", ""); a.code != http.StatusBadGateway {
		t.Fatalf("the apiserver's own 502 Status: %d %s, want it passed through", a.code, a.body)
	}
}

// The apiserver's 429 to a read the cache can answer is answered from the cache meanwhile; one it
// cannot answer gets the 429 with its Retry-After.
func TestProxyThrottledReadFromTheCache(t *testing.T) {
	f := newProxyFixture(t, nil)
	f.do(t, http.MethodGet, "/api/v1/namespaces/default/pods/web", kubelet, "", "")
	if err := f.hub.cache.Writer.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.cloud.mu.Lock()
	f.cloud.throttle = true
	f.cloud.mu.Unlock()
	if a := f.do(t, http.MethodGet, "/api/v1/namespaces/default/pods/web", kubelet, "", ""); a.code != http.StatusOK || !strings.Contains(a.body, `"name":"web"`) {
		t.Fatalf("the apiserver's 429: %d %s, want the cached pod", a.code, a.body)
	}
	if a := f.do(t, http.MethodGet, "/api/v1/namespaces/default/pods/never", kubelet, "", ""); a.code != http.StatusTooManyRequests {
		t.Fatalf("a 429 the cache cannot answer: %d %s, want it passed through", a.code, a.body)
	}
}

// nodeA is the node node-a at resourceVersion rv with a label version=v.
func nodeA(rv int, v string) string {
	return fmt.Sprintf(`{"kind":"Node","apiVersion":"v1","metadata":{"name":"node-a","uid":"n1","resourceVersion":"%d","labels":{"version":%q}},"status":{"conditions":[{"type":"Ready","status":"True"}]}}`, rv, v)
}

// kubelet's GET of its node is answered from the copy a live watch of the node keeps, with the
// Autonomy condition, while that watch is open and the cloud reachable; without a watch, or
// offline, it goes where it went before.
func TestProxyNodeGetFromTheWatch(t *testing.T) {
	f := newProxyFixture(t, nil)
	get := func() answer { return f.do(t, http.MethodGet, "/api/v1/nodes/node-a", kubelet, "", "") }
	gets := func() (n int) { // GETs of the node the cloud received (the condition's own write aside)
		for _, r := range f.cloud.took() {
			if r.method == http.MethodGet && r.uri == "/api/v1/nodes/node-a" {
				n++
			}
		}
		return n
	}
	if a := get(); a.code != http.StatusOK || !strings.Contains(a.body, `"version":"v1"`) {
		t.Fatalf("first GET: %d %s", a.code, a.body)
	}
	if n := gets(); n != 1 {
		t.Fatalf("without a watch the GET goes to the cloud: %d requests", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	resp := f.watchNodeA(t, ctx)
	lines := bufio.NewReader(resp.Body)
	f.cloud.nodeEvents <- `{"type":"MODIFIED","object":` + nodeA(9, "v2") + `}`
	if _, err := lines.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	f.cloud.took()
	a := get()
	if a.code != http.StatusOK || !strings.Contains(a.body, `"version":"v2"`) || !strings.Contains(a.body, `"type":"Autonomy"`) {
		t.Fatalf("GET with a live watch: %d %s, want the watched node with the Autonomy condition", a.code, a.body)
	}
	if n := gets(); n != 0 {
		t.Fatalf("GET with a live watch reached the cloud %d times", n)
	}
	if v := f.hub.metrics.nodeFromWatch.Value(); v != 1 {
		t.Fatalf("nodehub_node_reads_from_watch_total %v, want 1", v)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(30 * time.Second)
	for f.hub.pipe.CurrentNode() != nil {
		if time.Now().After(deadline) {
			t.Fatal("the copy stayed fresh after its watch ended")
		}
		time.Sleep(5 * time.Millisecond)
	}
	get()
	if n := gets(); n != 1 {
		t.Fatalf("after the watch ended the GET goes to the cloud: %d requests", n)
	}
}

// Before the first heartbeat's verdict, a read the cache can answer is answered from it (after
// the short cold-start wait) rather than waiting on a link that may be dead.
func TestProxyColdReadFromTheCache(t *testing.T) {
	f := newProxyFixture(t, nil)
	f.do(t, http.MethodGet, "/api/v1/namespaces/default/pods/web", kubelet, "", "")
	if err := f.hub.cache.Writer.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.cloud.took()
	f.hub.state.set(remote.Unknown)
	if a := f.do(t, http.MethodGet, "/api/v1/namespaces/default/pods/web", kubelet, "", ""); a.code != http.StatusOK || !strings.Contains(a.body, `"name":"web"`) {
		t.Fatalf("cold read: %d %s", a.code, a.body)
	}
	if got := f.cloud.took(); len(got) != 0 {
		t.Fatalf("a cold read the cache answers went to the cloud: %v", paths(got))
	}
	if a := f.do(t, http.MethodGet, "/api/v1/namespaces/default/pods/gone", kubelet, "", ""); a.code != http.StatusNotFound || len(f.cloud.took()) != 1 {
		t.Fatalf("a cold read the cache cannot answer: %d, want the cloud's answer", a.code)
	}
}

// kubelet's token request passes through online and its answer is kept: offline, the same
// request gets the same token.
func TestProxyKeepsTokensForOffline(t *testing.T) {
	f := newProxyFixture(t, nil)
	const path = "/api/v1/namespaces/default/serviceaccounts/app/token"
	if a := f.do(t, http.MethodPost, path, kubelet, "", tokenAsk); a.code != http.StatusCreated || a.body != tokenAnswer {
		t.Fatalf("online token request: %d %s, want the cloud's answer as it is", a.code, a.body)
	}
	f.offline(t)
	if a := f.do(t, http.MethodPost, path, kubelet, "", tokenAsk); a.code != http.StatusCreated || !strings.Contains(a.body, `"token":"the-issued-token"`) {
		t.Fatalf("offline token request: %d %s, want the kept token", a.code, a.body)
	}
}

// A write the offline proxy answers (an event) that the cloud leaves unanswered while the hub
// learns that no server is healthy gets the offline answer rather than a 503; a write it does not
// answer (a configmap) gets the 503.
func TestProxyUnansweredWriteGetsTheOfflineAnswer(t *testing.T) {
	f := newProxyFixture(t, nil)
	arrived := make(chan struct{}, 1)
	f.cloud.handle = func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodPost {
			return false
		}
		_, _ = io.Copy(io.Discard, r.Body) // (the server then notices the hub going away)
		arrived <- struct{}{}
		<-r.Context().Done() // never answered: the link is gone
		return true
	}
	// post sends a write the cloud holds; once it is there, the health checker's verdict comes:
	// no server is healthy.
	post := func(path, body string) answer {
		t.Helper()
		f.hub.state.set(remote.Healthy)
		go func() { <-arrived; f.hub.state.set(remote.Unhealthy) }()
		return f.do(t, http.MethodPost, path, kubelet, "", body)
	}
	ev := `{"kind":"Event","apiVersion":"v1","metadata":{"name":"e1","namespace":"default"},"reason":"Started"}`
	if a := post("/api/v1/namespaces/default/events", ev); a.code != http.StatusCreated || !strings.Contains(a.body, `"name":"e1"`) {
		t.Fatalf("event the cloud did not answer: %d %s, want the offline answer", a.code, a.body)
	}
	if a := post("/api/v1/namespaces/default/configmaps", `{"metadata":{"name":"c"}}`); a.code != http.StatusServiceUnavailable {
		t.Fatalf("a write the offline proxy does not answer: %d %s, want 503", a.code, a.body)
	}
}

// With pool sharing, the node's clients' lists of a pool-scope resource come from the shared
// store, not the cloud, through the same filters as the cloud's answers.
func TestProxyPoolScopeListsFromTheSharedStore(t *testing.T) {
	f := newProxyFixture(t, func(c *Config) {
		c.Filters = filterConfig()
		c.Pool.Resources = []pool.Resource{{Version: "v1", Resource: "services"}}
	})
	f.runPool(t)
	f.cloud.took()
	a := f.do(t, http.MethodGet, "/api/v1/services", kubelet, "", "")
	if a.code != http.StatusOK || !strings.Contains(a.body, `"clusterIP":"169.254.2.1"`) {
		t.Fatalf("kubelet's list of services: %d %s, want the store's, filtered", a.code, a.body)
	}
	if a := f.do(t, http.MethodGet, "/api/v1/services", "kube-proxy/v1.30.0", "", ""); a.code != http.StatusOK || !strings.Contains(a.body, `"clusterIP":"10.96.0.1"`) {
		t.Fatalf("kube-proxy's list of services: %d %s", a.code, a.body)
	}
	for _, r := range f.cloud.took() {
		if !strings.HasPrefix(r.ua, "nodehub") { // the store's own watch may start meanwhile
			t.Fatalf("the cloud got a client's %s %s", r.method, r.uri)
		}
	}
}

// The hub's own readers (the topology source) list a pool-scope resource from the shared store
// once it holds one: nothing is read from the cloud twice, and after an outage they list it again
// from the store.
func TestOwnReadersReadTheSharedStore(t *testing.T) {
	f := newProxyFixture(t, func(c *Config) {
		c.Pool.Resources = []pool.Resource{{Version: "v1", Resource: "services"}}
	})
	ctx := f.runPool(t)
	f.cloud.took()
	fetch := f.hub.ownFetch("topology")
	resp, err := fetch(ctx, "/api/v1/services?resourceVersion=0")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"name":"kubernetes"`) {
		t.Fatalf("own list: %d %s", resp.StatusCode, body)
	}
	for _, r := range f.cloud.took() {
		if r.ua == "nodehub/topology" {
			t.Fatalf("the cloud got the topology's %s %s", r.method, r.uri)
		}
	}
}
