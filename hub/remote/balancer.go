package remote

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
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

// Balancer is an http.RoundTripper that sends each request to a healthy backend. A request that
// fails to connect (nothing was sent) is tried on the next healthy backend when it has no body;
// the failing server is marked suspect either way.
type Balancer struct {
	// Mode is RoundRobin or Priority. Default RoundRobin.
	Mode string
	// Backends in flag order.
	Backends []*Backend
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

// order returns the healthy backends in the order this request should try them: flag order for
// Priority, rotated by one per request over the healthy ones for RoundRobin.
func (l *Balancer) order() []*Backend {
	out := make([]*Backend, 0, len(l.Backends))
	for _, b := range l.Backends {
		if b.Healthy() {
			out = append(out, b)
		}
	}
	if l.Mode != Priority && len(out) > 1 {
		k := int(l.next.Add(1)-1) % len(out)
		out = append(out[k:], out[:k]...)
	}
	return out
}

// RoundTrip implements http.RoundTripper with the Route recorded in the request's context.
func (l *Balancer) RoundTrip(req *http.Request) (*http.Response, error) {
	route := RouteOf(req.Context())
	retryable := req.Body == nil || req.Body == http.NoBody
	var lastErr error
	for _, b := range l.order() {
		resp, err := b.RoundTrip(route, req)
		if l.OnRequest != nil {
			l.OnRequest(b, err)
		}
		if err == nil {
			return resp, nil
		}
		if errors.Is(err, ErrNoCredentials) || req.Context().Err() != nil {
			return nil, err // not the server's fault
		}
		b.MarkSuspect(err)
		lastErr = fmt.Errorf("%s: %w", b.Name, err)
		if !retryable || !isDialError(err) {
			return nil, lastErr
		}
	}
	if lastErr != nil {
		return nil, lastErr
	}
	return nil, ErrNoHealthyBackend
}

// isDialError reports whether err happened before anything was sent: the connection was never made.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
