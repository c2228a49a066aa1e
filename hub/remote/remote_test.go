package remote

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// noCreds is for plain-http test backends, which need no TLS material.
type noCreds struct{ Credentials }

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
		resp, err := l.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	rr := &Balancer{Mode: RoundRobin, Backends: bs}
	for i := 0; i < 30; i++ {
		get(rr)
	}
	for i := range hits {
		if n := hits[i].Swap(0); n != 10 {
			t.Fatalf("rr: backend %d got %d of 30", i, n)
		}
	}
	bs[0].health.healthy.Store(false)
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
		b.health.healthy.Store(false)
	}
	req, _ := http.NewRequest("GET", "http://hub/api/v1/nodes", nil)
	if _, err := pr.RoundTrip(req); !errors.Is(err, ErrNoHealthyBackend) {
		t.Fatalf("all unhealthy: %v", err)
	}
}

func TestBalancerRetriesRefusedConnectionAndMarksSuspect(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + ln.Addr().String()
	ln.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	d, ok := backend(t, dead), backend(t, srv.URL)
	l := &Balancer{Mode: Priority, Backends: []*Backend{d, ok}}
	req, _ := http.NewRequest("GET", "http://hub/api/v1/pods", nil)
	resp, err := l.RoundTrip(req)
	if err != nil {
		t.Fatalf("refused connection not retried: %v", err)
	}
	resp.Body.Close()
	if d.Healthy() {
		t.Fatal("refused server not marked unhealthy")
	}
	select {
	case <-d.health.kick:
	default:
		t.Fatal("suspect server not queued for an immediate probe")
	}
}

func TestCheckerThresholds(t *testing.T) {
	var fail atomic.Bool
	b := backend(t, "http://127.0.0.1:1")
	changes := make(chan bool, 10)
	c := &Checker{
		Probe: func(context.Context, *Backend) error {
			if fail.Load() {
				return errors.New("down")
			}
			return nil
		},
		Interval: 20 * time.Millisecond, FailedRetry: 3, HealthyThreshold: 2,
		OnChange: func(_ *Backend, h bool) { changes <- h },
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx, []*Backend{b})
	if h := <-changes; !h {
		t.Fatal("initial state not healthy")
	}
	time.Sleep(60 * time.Millisecond)
	if !b.Reached() {
		t.Fatal("not reached after successful probes")
	}
	fail.Store(true)
	start := time.Now()
	if h := <-changes; h {
		t.Fatal("expected unhealthy")
	}
	if d := time.Since(start); d < 40*time.Millisecond {
		t.Fatalf("unhealthy after %v: fewer than 3 failures", d)
	}
	fail.Store(false)
	start = time.Now()
	if h := <-changes; !h {
		t.Fatal("expected healthy")
	}
	if d := time.Since(start); d < 15*time.Millisecond {
		t.Fatalf("healthy after %v: fewer than 2 successes", d)
	}
	// A proxied failure turns it unhealthy at once; the immediate re-probe starts the way back.
	b.MarkSuspect(errors.New("connection reset"))
	if h := <-changes; h {
		t.Fatal("MarkSuspect did not turn the server unhealthy")
	}
	if h := <-changes; !h {
		t.Fatal("server did not recover after MarkSuspect")
	}
}
