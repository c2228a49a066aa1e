package remote

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// A reach outlasts one lost SYN (Linux resends it after 1 s) and the handshake after it.
func TestReachOutlastsALostSYN(t *testing.T) {
	var h health
	h.init()
	tm := defaultTiming
	if d := h.reachTimeout(&tm); d < time.Second+400*time.Millisecond {
		t.Fatalf("a reach waits %v: one lost SYN (resent after 1 s) makes it fail", d)
	}
}

// A slow request's reach that fails (a lost packet) after the request got its answer does not take
// the hub offline: the late answer proved the link.
func TestLateAnswerClearsTheSuspicion(t *testing.T) {
	reachOut, answered := make(chan struct{}), make(chan struct{})
	var first sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != pingPath {
			<-reachOut // the request waits until its reach is out
		}
	}))
	defer srv.Close()
	b := backend(t, srv.URL)
	changes, reaches := make(chan State, 10), make(chan error, 10)
	c := &Checker{Interval: time.Hour, Timeout: time.Minute,
		Reach: func(ctx context.Context, _ *Backend) error {
			var err error // the next reaches answer
			first.Do(func() {
				close(reachOut)
				<-answered
				err = errors.New("no answer: its SYN was lost")
			})
			return err
		},
		OnChange: func(_ *Backend, s State) { changes <- s },
		OnReach:  func(_ *Backend, err error) { reaches <- err }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx, []*Backend{b}); close(done) }()
	defer func() { cancel(); <-done }()
	for _, want := range []State{Unknown, Healthy} {
		if s := <-changes; s != want {
			t.Fatalf("state %v, want %v", s, want)
		}
	}
	req, _ := http.NewRequest("GET", srv.URL+"/api/v1/pods", nil)
	resp, err := (&Balancer{Backends: []*Backend{b}, SuspectAfter: 20 * time.Millisecond}).Send(Route{}, req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	close(answered)
	if err := <-reaches; err == nil {
		t.Fatal("the reach answered")
	}
	// The reach's outcome is applied by the checker's loop after OnReach; the next reach starts
	// only after it was.
	b.MarkSuspect(errors.New("connection reset"))
	select {
	case s := <-changes:
		t.Fatalf("state %v after a slow request was answered and then its reach failed", s)
	case <-reaches:
	}
	if !b.Healthy() {
		t.Fatal("unhealthy after a slow request was answered and then its reach failed")
	}
}

// Requests that fail outright while the server's end answers (a server resetting connections, an
// apiserver's rolling restart) cost a handshake at most every reachBackoffMax once reaches keep
// answering, not one per failed request.
func TestFailingRequestsReachesBackOff(t *testing.T) {
	s := newSim(cuts([2]time.Duration{80 * time.Second, time.Hour}))
	s.suspect = func(d time.Duration) bool { return d < 60*time.Second || d >= 80*time.Second }
	s.failed = errors.New("connection reset by peer")
	s.run(60 * time.Second)
	if len(s.changes) != 1 || s.changes[0].state != Healthy {
		t.Fatalf("changes %v", s.changes)
	}
	if n, most := s.probes[reach], 3+int(60*time.Second/reachBackoffMax); n > most {
		t.Fatalf("%d reaches in 60 s of failing requests (want ≤ %d)", n, most)
	}
	// After a quiet spell, a request that fails is reached for at once again: a cut at 80 s is
	// noticed after one reach.
	s.run(85 * time.Second)
	if down := s.first(Unhealthy, 80*time.Second); down < 0 || down > 80*time.Second+reachFloor+200*time.Millisecond {
		t.Fatalf("a cut 20 s after the last failing request: offline at %v; changes %v", down, s.changes)
	}
}

// A reach resumes the TLS session of the node's last probe (no certificate or signature for the
// apiserver to make) and leaves none of its own for the node's connections.
func TestReachResumesTheProbesSession(t *testing.T) {
	handshakes := make(chan bool, 10) // the server's side ends after the client's
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			handshakes <- cs.DidResume
			return nil
		}}
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	b, err := NewBackend(srv.URL, tlsCreds{pool, clientCert(t)}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := b.Reach(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	var resumed []bool
	for range 3 {
		select {
		case r := <-handshakes:
			resumed = append(resumed, r)
		case <-time.After(30 * time.Second):
			t.Fatalf("handshakes resumed: %v; the server saw no more", resumed)
		}
	}
	if resumed[0] || !resumed[1] || !resumed[2] {
		t.Fatalf("handshakes resumed: %v (want the ping's full, then the reaches' resumed)", resumed)
	}
}
