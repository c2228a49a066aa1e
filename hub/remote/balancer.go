package remote

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Load-balancing modes (--lb-mode).
const (
	// RoundRobin spreads requests over the healthy servers in turn.
	RoundRobin = "rr"
	// Priority sends every request to the first healthy server in flag order.
	Priority = "priority"
)

// ErrNoHealthyBackend is returned when every server is unhealthy.
var ErrNoHealthyBackend = errors.New("remote: no healthy cloud server")

// ErrNoAnswerYet is what a server is suspected of when a request waited SuspectAfter for it.
var ErrNoAnswerYet = errors.New("remote: no answer yet")

// ErrSlow is returned when a request with a HeaderTimeout was given up (see Route).
var ErrSlow = errors.New("remote: cloud server did not answer in time")

// Balancer is an http.RoundTripper that sends each request to a healthy backend (to one not yet
// probed while none is healthy: the hub just started). A request that fails to connect (nothing
// was sent) is tried on the next backend when it has no body; the failing server is marked
// suspect either way, as is one that keeps a request waiting for its answer longer than
// SuspectAfter. Suspicion only makes the Checker look at once; it never decides health.
type Balancer struct {
	// Mode is RoundRobin or Priority. Default RoundRobin.
	Mode string
	// Backends in flag order.
	Backends []*Backend
	// SuspectAfter, if positive, marks a server suspect when a request to it has had no response
	// headers for this long (a black-holed link is noticed while clients are active).
	SuspectAfter time.Duration
	// OnRequest, if set, is called once per attempt with the server that was tried and the error
	// (nil when an HTTP response came back).
	OnRequest func(b *Backend, err error)

	next atomic.Uint32
}

// Healthy reports whether any backend is healthy.
func (l *Balancer) Healthy() bool {
	for _, b := range l.Backends {
		if b.Healthy() {
			return true
		}
	}
	return false
}

// State sums up the backends: Healthy when one is, else Unknown when one is not probed yet, else
// Unhealthy.
func (l *Balancer) State() State {
	st := Unhealthy
	for _, b := range l.Backends {
		switch b.State() {
		case Healthy:
			return Healthy
		case Unknown:
			st = Unknown
		}
	}
	return st
}

// order returns the backends this request should try, in order: the healthy ones (the unknown
// ones while none is healthy), in flag order for Priority, rotated by one per request for
// RoundRobin.
func (l *Balancer) order() []*Backend {
	out := make([]*Backend, 0, len(l.Backends))
	for _, want := range []State{Healthy, Unknown} {
		for _, b := range l.Backends {
			if b.State() == want {
				out = append(out, b)
			}
		}
		if len(out) > 0 {
			break
		}
	}
	if l.Mode != Priority && len(out) > 1 {
		k := int(l.next.Add(1)-1) % len(out)
		out = append(out[k:], out[:k]...)
	}
	return out
}

// Send sends req to a healthy server as route says (the URL's scheme and host are the server's).
func (l *Balancer) Send(route Route, req *http.Request) (*http.Response, error) {
	if route.HeaderTimeout <= 0 || route.OnSlow == nil {
		resp, _, err := l.roundTrip(route, req)
		return resp, err
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	var mu sync.Mutex
	answered, slow := false, false
	timer := time.AfterFunc(route.HeaderTimeout, func() {
		if !route.OnSlow() {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !answered {
			slow = true
			cancel(ErrSlow)
		}
	})
	resp, b, err := l.roundTrip(route, req.WithContext(ctx))
	timer.Stop()
	mu.Lock()
	answered = true
	wasSlow := slow
	mu.Unlock()
	if wasSlow {
		if resp != nil {
			resp.Body.Close()
		}
		if b != nil {
			b.MarkSuspect(ErrSlow) // a probe tells whether the server or only this request is slow
		}
		return nil, ErrSlow
	}
	return resp, err
}

func (l *Balancer) roundTrip(route Route, req *http.Request) (*http.Response, *Backend, error) {
	retryable := req.Body == nil || req.Body == http.NoBody
	var lastErr error
	for _, b := range l.order() {
		waiting := l.watchWait(b)
		resp, err := b.RoundTrip(route, req)
		if waiting.stop() && err == nil {
			b.MarkAnswered() // the late answer proves the link
		}
		if l.OnRequest != nil {
			l.OnRequest(b, err)
		}
		if err == nil {
			return resp, b, nil
		}
		if errors.Is(err, ErrNoCredentials) || req.Context().Err() != nil {
			return nil, b, err // not the server's fault (or given up as slow: the caller marks it)
		}
		b.MarkSuspect(err)
		lastErr = fmt.Errorf("%s: %w", b.Name, err)
		if !retryable || !isDialError(err) {
			return nil, b, lastErr
		}
	}
	if lastErr != nil {
		return nil, nil, lastErr
	}
	return nil, nil, ErrNoHealthyBackend
}

// waitMark marks a server suspect when a request to it has had no answer for the Balancer's
// SuspectAfter.
type waitMark struct {
	mu          sync.Mutex
	timer       *time.Timer
	fired, done bool
}

func (l *Balancer) watchWait(b *Backend) *waitMark {
	if l.SuspectAfter <= 0 {
		return nil
	}
	w := &waitMark{}
	w.timer = time.AfterFunc(l.SuspectAfter, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.done {
			w.fired = true
			b.MarkSuspect(ErrNoAnswerYet)
		}
	})
	return w
}

// stop ends the wait (the request has its answer or failed) and reports whether it marked the
// server suspect.
func (w *waitMark) stop() bool {
	if w == nil {
		return false
	}
	w.timer.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	return w.fired
}

// isDialError reports whether err happened before anything was sent: the connection was never made.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
