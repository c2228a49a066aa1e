package remote

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"nodehub/wire"
)

// noCreds is for plain-http test backends, which need no TLS material.
type noCreds struct{ wire.Credentials }

func backend(t *testing.T, url string) *Backend {
	t.Helper()
	b, err := NewBackend(url, noCreds{}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseServerAddr(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.1:6443":          "https://10.0.0.1:6443",
		"https://api.example":    "https://api.example:443",
		"http://127.0.0.1:8080/": "http://127.0.0.1:8080",
		"https://[fd00::1]:6443": "https://[fd00::1]:6443",
	} {
		u, err := ParseServerAddr(in)
		if err != nil || u.String() != want {
			t.Errorf("ParseServerAddr(%q) = %v, %v; want %s", in, u, err, want)
		}
	}
	for _, bad := range []string{"", "ftp://x:1", "https://x:1/path", "https://x:1?q=1"} {
		if _, err := ParseServerAddr(bad); err == nil {
			t.Errorf("ParseServerAddr(%q): no error", bad)
		}
	}
}

func setState(b *Backend, st State) { b.health.state.Store(int32(st)) }

func TestBalancerModes(t *testing.T) {
	hits := make([]atomic.Int32, 3)
	var bs []*Backend
	for i := range hits {
		srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits[i].Add(1) }))
		t.Cleanup(srv.Close)
		bs = append(bs, backend(t, srv.URL))
	}
	get := func(l *Balancer) {
		req, _ := http.NewRequest("GET", "http://hub/api/v1/nodes", nil)
		resp, err := l.Send(Route{}, req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	// Not probed yet: tried all the same (a hub that just started forwards writes).
	rr := &Balancer{Mode: RoundRobin, Backends: bs}
	for i := 0; i < 30; i++ {
		get(rr)
	}
	for i := range hits {
		if n := hits[i].Swap(0); n != 10 {
			t.Fatalf("rr, unknown: backend %d got %d of 30", i, n)
		}
	}
	if rr.State() != Unknown {
		t.Fatalf("state %v", rr.State())
	}
	// One healthy: only it, while the others are unknown.
	setState(bs[2], Healthy)
	for i := 0; i < 6; i++ {
		get(rr)
	}
	if hits[0].Swap(0) != 0 || hits[1].Swap(0) != 0 || hits[2].Swap(0) != 6 {
		t.Fatal("rr preferred an unknown backend to a healthy one")
	}
	for _, b := range bs {
		setState(b, Healthy)
	}
	setState(bs[0], Unhealthy)
	for i := 0; i < 20; i++ {
		get(rr)
	}
	if hits[0].Swap(0) != 0 || hits[1].Swap(0) != 10 || hits[2].Swap(0) != 10 {
		t.Fatal("rr used an unhealthy backend or spread unevenly")
	}
	pr := &Balancer{Mode: Priority, Backends: bs}
	for i := 0; i < 5; i++ {
		get(pr)
	}
	if hits[1].Load() != 5 || hits[2].Load() != 0 {
		t.Fatalf("priority: %d %d", hits[1].Load(), hits[2].Load())
	}
	for _, b := range bs {
		setState(b, Unhealthy)
	}
	if pr.State() != Unhealthy || pr.Healthy() {
		t.Fatalf("all unhealthy: state %v", pr.State())
	}
	req, _ := http.NewRequest("GET", "http://hub/api/v1/nodes", nil)
	if _, err := pr.Send(Route{}, req); !errors.Is(err, ErrNoHealthyBackend) {
		t.Fatalf("all unhealthy: %v", err)
	}
}

func TestBalancerRetriesRefusedConnectionAndSuspectsIt(t *testing.T) {
	// Port 1: nothing listens there and the kernel never hands it out (a port released by a
	// listener could be bound again by another test's server before the dial).
	dead := "http://127.0.0.1:1"
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	d, ok := backend(t, dead), backend(t, srv.URL)
	setState(d, Healthy)
	setState(ok, Healthy)
	l := &Balancer{Mode: Priority, Backends: []*Backend{d, ok}}
	req, _ := http.NewRequest("GET", "http://hub/api/v1/pods", nil)
	resp, err := l.Send(Route{}, req)
	if err != nil {
		t.Fatalf("refused connection not retried: %v", err)
	}
	resp.Body.Close()
	if !d.Healthy() {
		t.Fatal("a request alone turned the server unhealthy")
	}
	select {
	case <-d.health.kick:
	default:
		t.Fatal("suspect server not queued for an immediate probe")
	}
}

// A request that waits longer than SuspectAfter (or is given up as slow) asks for a probe; it
// never changes the server's health itself.
func TestBalancerSuspectsSlowAnswer(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	b := backend(t, srv.URL)
	setState(b, Healthy)
	l := &Balancer{Backends: []*Backend{b}, SuspectAfter: 20 * time.Millisecond}
	req, _ := http.NewRequest("GET", "http://hub/api/v1/pods", nil)
	if _, err := l.Send(Route{HeaderTimeout: 50 * time.Millisecond, OnSlow: func() bool { return true }}, req); !errors.Is(err, ErrSlow) {
		t.Fatalf("slow answer: %v", err)
	}
	if !b.Healthy() {
		t.Fatal("a slow request turned the server unhealthy")
	}
	select {
	case <-b.health.kick:
	default:
		t.Fatal("slow server not queued for an immediate probe")
	}
	b.health.mu.Lock()
	defer b.health.mu.Unlock()
	if b.health.suspectAt.IsZero() {
		t.Fatal("no suspicion recorded")
	}
}

// The probe asks whether the server answers: a readiness check failing is an answer, a gateway
// without a server behind it is not.
func TestPing(t *testing.T) {
	for code, ok := range map[int]bool{200: true, 401: true, 403: true, 500: true, 502: false, 503: false, 504: false} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/readyz" {
				t.Errorf("ping path %s", r.URL.Path)
			}
			w.WriteHeader(code)
		}))
		err := backend(t, srv.URL).Ping(context.Background())
		srv.Close()
		if (err == nil) != ok {
			t.Errorf("readyz %d: ping error %v", code, err)
		}
	}
}
