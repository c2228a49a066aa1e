package remote

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// A reach tells a black-holed link from a slow cloud while a request waits: when a request to a
// healthy server has had no answer for the Balancer's SuspectAfter (or failed), the checker asks
// at once, without waiting for the probes still out, whether the server's end of the link answers
// at all: a new connection and its TLS handshake (over plain http, the first byte of an answer to
// GET /readyz). A slow apiserver (its etcd, its queues) still completes handshakes in a few round
// trips; a black hole answers nothing. A reach that gets no answer within its short deadline while
// the request it was sent for is still in trouble makes the server unhealthy: the hub goes offline
// and the waiting reads are answered from the cache at once. One that is answered clears the
// suspicion: the request goes on waiting for the cloud. So does the request's own answer (the
// Balancer's MarkAnswered): a late answer proves the link, and a reach still out no longer counts.

// reachFloor is the least deadline of a reach: above Linux's 1 s retransmit of a lost SYN plus a
// handshake's round trips (a few ms on a LAN, ~100 ms on a cellular link), so one lost packet does
// not take the hub offline; short enough that a client restarted into an outage is served from the
// cache within ~2 s of its first request (0.3 s waiting, the hub's SuspectAfter, then this).
const reachFloor = 1500 * time.Millisecond

// reachBackoffMax bounds the gap between reaches sent for requests that fail while the reaches
// answer (a server that resets connections, an apiserver's rolling restart): each answered reach
// doubles the gap from reachBackoffFirst up to this, so a node's clients retrying many times a
// second cost the cloud one handshake per this at most, not one per failed request.
const (
	reachBackoffFirst = 5 * time.Second
	reachBackoffMax   = 10 * time.Second
)

// reachRTTs is how many of the link's slowest recent answer times a reach waits at least: a reach
// is two round trips (TCP, then TLS 1.3), a ping on a kept connection one.
const reachRTTs = 4

// sample records how long a good ping or reach took: the estimate goes up at once and down by an
// eighth of the difference per sample, so one fast answer does not shorten the next reach's wait.
func (h *health) sample(d time.Duration) {
	if d > h.linkTime {
		h.linkTime = d
		return
	}
	h.linkTime -= (h.linkTime - d) / 8
}

// reachTimeout is the deadline of the next reach: reachRTTs times the link's recent answer time,
// at least t.reachFloor, at most a probe's timeout.
func (h *health) reachTimeout(t *timing) time.Duration {
	return min(max(reachRTTs*h.linkTime, t.reachFloor), t.timeout)
}

// reachResult applies a reach's outcome: no answer while a request is still in trouble makes the
// server unhealthy; an answer clears the trouble seen before it started.
func (h *health) reachResult(started time.Time, err error, now time.Time) (State, bool) {
	h.reaching = false
	prev := h.get()
	if prev != Healthy {
		return prev, false // decided meanwhile
	}
	if err == nil {
		h.sample(now.Sub(started))
		if !h.suspectAt.IsZero() && !started.Before(h.suspectAt) {
			h.suspectAt = time.Time{}
		}
		if h.reachUrgent {
			// A request failed, yet the server's end answers: the next reaches for failing
			// requests tell nothing new sooner than this.
			h.backoff = min(max(2*h.backoff, reachBackoffFirst), reachBackoffMax)
		}
		return prev, false
	}
	h.backoff = 0
	if h.suspectAt.IsZero() || started.Before(h.suspectAt) || errors.Is(err, ErrNoCredentials) {
		// A probe or the request itself answered after the trouble began (the link is alive; a
		// newer trouble gets a reach of its own), or the reach could not be sent (no cluster CA
		// yet): no verdict on the server.
		return prev, false
	}
	h.lastErr = err
	h.fails++
	return h.turn(Unhealthy, reach, now)
}

// Reach reports whether the server's end of the link answers now: it opens a new connection and
// completes a TLS handshake (https: the server's certificate is checked, none is presented; a
// handshake costs the apiserver no request), or for http gets the first byte of an answer to GET
// /readyz. It sends nothing secret and closes the connection.
func (b *Backend) Reach(ctx context.Context) error {
	d := net.Dialer{}
	conn, err := d.DialContext(ctx, "tcp", b.URL.Host)
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if b.URL.Scheme == "https" {
		pool := b.creds.CAPool()
		if pool == nil {
			return ErrNoCredentials
		}
		host, _, _ := net.SplitHostPort(b.URL.Host)
		cfg := &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12,
			CurvePreferences: []tls.CurveID{tls.X25519, tls.CurveP256}, ClientSessionCache: b.reachSessions()}
		err = tls.Client(conn, cfg).HandshakeContext(ctx)
		if answered(err) {
			return nil // a certificate or TLS mismatch is an answer: the request's own errors tell it
		}
	} else {
		_, err = fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: nodehub\r\nConnection: close\r\n\r\n", pingPath, b.URL.Host)
		if err == nil {
			_, err = bufio.NewReader(conn).ReadByte()
		}
	}
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("the link did not answer: %w", ctx.Err())
	}
	return err
}

// reachSessions lends a reach the TLS sessions of the probes' transport: a resumed handshake costs
// the apiserver no certificate or signature. It stores none: a reach presents no certificate, and
// a session made without one would have the node's next probe resume it without its identity.
func (b *Backend) reachSessions() tls.ClientSessionCache {
	tr, err := b.transport(pingSlot)
	t, ok := tr.(*http.Transport)
	if err != nil || !ok || t.TLSClientConfig == nil || t.TLSClientConfig.ClientSessionCache == nil {
		return nil
	}
	return lentSessions{t.TLSClientConfig.ClientSessionCache}
}

// lentSessions reads a transport's session cache and writes nothing to it.
type lentSessions struct{ tls.ClientSessionCache }

func (lentSessions) Put(string, *tls.ClientSessionState) {}

// answered reports whether a failed handshake got something from the server.
func answered(err error) bool {
	var alert tls.AlertError
	var verify *tls.CertificateVerificationError
	var header tls.RecordHeaderError
	return errors.As(err, &alert) || errors.As(err, &verify) || errors.As(err, &header)
}
