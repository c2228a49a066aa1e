package remote

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A client restarted into an outage (the hub idle since the cut: only the heartbeat, which may be
// out on the dead link) has the hub offline within half a second of waiting plus one reach, at
// whatever moment after the cut it restarts and whatever the heartbeat's phase: its reads are
// answered from the cache then, not after a probe's 2 s timeout.
func TestClientRestartedIntoOutageServedQuickly(t *testing.T) {
	limit := suspectGap + reachFloor + 100*time.Millisecond // the sim's client looks every 100 ms
	for phase := time.Duration(0); phase < 10*time.Second; phase += 300 * time.Millisecond {
		for _, m := range []time.Duration{0, time.Second, 3 * time.Second, 5 * time.Second, 10 * time.Second} {
			cut := 30*time.Second + phase
			restart := cut + m
			s := newSim(cuts([2]time.Duration{cut, time.Hour}))
			s.suspect = func(d time.Duration) bool { return d >= restart+suspectGap } // its first request waits
			s.run(restart + 10*time.Second)
			down := s.first(Unhealthy, cut)
			if down < 0 || down-restart > limit {
				t.Fatalf("phase %v, restart %v after the cut: offline %v after the restart (want ≤ %v); changes %v",
					phase, m, down-restart, limit, s.changes)
			}
		}
	}
}

// blackHole accepts connections and never sends or reads a byte: a link that stopped passing
// packets after the connection was made (as the e2e relay does).
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// reachLoop runs a Checker whose heartbeat and pings answer until cut, then wait out their timeout
// (a minute: only a reach can decide within the test), on backend b. It returns the state changes
// and the reaches' outcomes.
func reachLoop(t *testing.T, b *Backend, cut *atomic.Bool) (<-chan State, <-chan error) {
	t.Helper()
	probe := func(ctx context.Context, _ *Backend) error {
		if cut.Load() {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
	changes, reaches := make(chan State, 10), make(chan error, 100)
	c := &Checker{Probe: probe, Ping: probe, Interval: time.Hour, Timeout: time.Minute,
		OnChange: func(_ *Backend, s State) { changes <- s },
		OnReach: func(_ *Backend, err error) {
			select {
			case reaches <- err:
			default:
			}
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx, []*Backend{b}); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	for _, want := range []State{Unknown, Healthy} {
		if s := <-changes; s != want {
			t.Fatalf("state %v, want %v", s, want)
		}
	}
	return changes, reaches
}

// A request into a black hole has the server unhealthy after one reach, while the heartbeat and
// pings still out would take their whole timeout (a minute here) to fail; a slow server (its
// requests wait, its handshakes answer) stays healthy however long its request waits.
func TestReachTellsBlackHoleFromSlowCloud(t *testing.T) {
	release := make(chan struct{})
	slow := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != pingPath {
			<-release
		}
	}))
	defer slow.Close()
	defer close(release)
	pool := x509.NewCertPool()
	pool.AddCert(slow.Certificate())
	creds := tlsCreds{pool: pool, cert: clientCert(t)}

	t.Run("black hole", func(t *testing.T) {
		b, err := NewBackend(blackHole(t), creds, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var cut atomic.Bool
		changes, reaches := reachLoop(t, b, &cut)
		cut.Store(true)
		ctx, cancel := context.WithCancel(context.Background())
		sent := make(chan error, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", "https://hub/api/v1/pods", nil)
			_, err := (&Balancer{Backends: []*Backend{b}, SuspectAfter: 20 * time.Millisecond}).Send(Route{}, req)
			sent <- err
		}()
		select {
		case s := <-changes:
			if s != Unhealthy {
				t.Fatalf("state %v, want unhealthy", s)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a request into a black hole: still healthy after 30 s")
		}
		if err := <-reaches; err == nil {
			t.Fatal("the reach into the black hole answered")
		}
		cancel() // the hub cancels it when the cloud turns offline
		<-sent
	})

	t.Run("slow", func(t *testing.T) {
		b, err := NewBackend(slow.Listener.Addr().String(), creds, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var cut atomic.Bool
		changes, reaches := reachLoop(t, b, &cut)
		sent := make(chan error, 1)
		go func() {
			req, _ := http.NewRequest("GET", "https://hub/api/v1/pods", nil)
			resp, err := (&Balancer{Backends: []*Backend{b}, SuspectAfter: 20 * time.Millisecond}).Send(Route{}, req)
			if err == nil {
				resp.Body.Close()
			}
			sent <- err
		}()
		if err := <-reaches; err != nil { // the reach the waiting request asked for
			t.Fatalf("reach of a slow server: %v", err)
		}
		select {
		case s := <-changes:
			t.Fatalf("a slow server's state changed to %v", s)
		default:
		}
		if !b.Healthy() {
			t.Fatal("a slow server turned unhealthy")
		}
		release <- struct{}{}
		if err := <-sent; err != nil {
			t.Fatalf("the slow request: %v", err)
		}
	})
}

// A handshake that fails on the certificate is an answer: the server is there.
func TestReachCountsATLSErrorAsAnAnswer(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	b, err := NewBackend(srv.Listener.Addr().String(), tlsCreds{pool: x509.NewCertPool()}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Reach(context.Background()); err != nil {
		t.Fatalf("untrusted certificate: %v", err)
	}
	ln := blackHole(t)
	b, _ = NewBackend(ln, tlsCreds{pool: x509.NewCertPool()}, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := b.Reach(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("black hole: %v", err)
	}
}

// A reach that could not be sent (no cluster CA) is no verdict on the server.
func TestReachWithoutCredentialsIsNoVerdict(t *testing.T) {
	var h health
	h.init()
	tm := defaultTiming
	seq := h.start(epoch, ping, &tm)
	h.result(seq, epoch, ping, nil, epoch.Add(rtt), &tm)
	now := epoch.Add(time.Second)
	h.suspect(now, ErrNoAnswerYet)
	h.start(now, reach, &tm)
	if st, changed := h.result(0, now, reach, ErrNoCredentials, now, &tm); changed || st != Healthy {
		t.Fatalf("a reach without credentials: %v (changed %v)", st, changed)
	}
	h.start(now, reach, &tm)
	if st, changed := h.result(0, now, reach, errTimeout, now.Add(reachFloor), &tm); !changed || st != Unhealthy {
		t.Fatalf("a reach with no answer: %v (changed %v)", st, changed)
	}
}
