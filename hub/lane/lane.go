// Package lane serves a plain proxy port's short GETs on the connection's own goroutine (Lane),
// and hands every other request, with its connection, to net/http's server.
package lane

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// A Lane serves a plain proxy port's short GETs — what the node's clients send most, a GET
// of one object or a list, without a body — on the connection's own goroutine: the request is
// read, handled and answered there, with nothing started beside it. net/http's server starts a
// goroutine per request to watch the connection and stops it after the answer (two more thread
// wake-ups per request on a small machine); this is the hop's least cost (docs/figures.md).
//
// Every other request — a body, an upgrade, a watch or a followed log (long requests, whose end
// the client's going away must cause) — and every request after it on the same connection goes
// to hs, net/http's server with the port's handler and limits: the connection is handed over with
// the request's bytes put back in front of it.
type Lane struct {
	h    http.Handler
	hs   *http.Server
	log  *slog.Logger
	base context.Context

	handoff *connQueue // hs serves the connections handed over

	mu      sync.Mutex
	conns   map[*laneConn]bool // the lane's connections: true while waiting for a request
	closing bool
	wg      sync.WaitGroup
}

// New is a lane in front of hs, which has the port's handler and bounds (MaxHeaderBytes,
// ReadHeaderTimeout, IdleTimeout: the lane keeps them too) and serves what the lane hands over.
// base is every request's context's parent (the hub's lifetime).
func New(base context.Context, hs *http.Server, log *slog.Logger, addr net.Addr) *Lane {
	return &Lane{h: hs.Handler, hs: hs, log: log, base: base, handoff: newConnQueue(addr), conns: map[*laneConn]bool{}}
}

// Serve accepts ln's connections until it is closed, and serves them (hs those handed over)
// until Shutdown; it returns once ln is closed and hs has stopped serving.
func (f *Lane) Serve(ln net.Listener) error {
	hsDone := make(chan error, 1)
	go func() { hsDone <- f.hs.Serve(f.handoff) }()
	err := f.accept(ln)
	f.handoff.Close()
	<-hsDone
	return err
}

// accept serves each connection ln accepts on a goroutine of its own until ln fails; a
// temporary failure (out of descriptors) is waited out as net/http does: 5 ms, doubling to 1 s.
func (f *Lane) accept(ln net.Listener) error {
	var wait time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Temporary() { //nolint:staticcheck // as net/http's Serve
				wait = min(max(2*wait, 5*time.Millisecond), time.Second)
				f.log.Debug("proxy: accept failed; retrying", "err", err, "in", wait)
				time.Sleep(wait)
				continue
			}
			return err
		}
		wait = 0
		lc := &laneConn{Conn: c, limit: -1}
		if !f.track(lc) {
			c.Close()
			continue
		}
		go f.serveConn(lc)
	}
}

// track adds a connection and counts its goroutine (not while closing: Shutdown waits for every
// goroutine counted before it set closing).
func (f *Lane) track(c *laneConn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closing {
		return false
	}
	f.conns[c] = false
	f.wg.Add(1)
	return true
}

// setIdle marks c waiting for a request (true) or serving one; false when the lane is closing.
func (f *Lane) setIdle(c *laneConn, idle bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.conns[c] = idle
	return !f.closing
}

func (f *Lane) untrack(c *laneConn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.conns, c)
}

// Shutdown ends the lane as http.Server.Shutdown does: hs first (its listener, the handed-over
// connections), then the idle connections at once and the busy ones after their answer; past
// ctx's deadline every connection is closed. The caller has closed the port's listener.
func (f *Lane) Shutdown(ctx context.Context) {
	err := f.hs.Shutdown(ctx)
	f.mu.Lock()
	f.closing = true
	for c, idle := range f.conns {
		if idle || err != nil {
			c.Close()
		}
	}
	f.mu.Unlock()
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	_ = f.hs.Close()
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	<-done
}

// serveConn serves c's requests until it closes, fails, or is handed over.
func (f *Lane) serveConn(c *laneConn) {
	defer f.wg.Done()
	// As net/http's: the server (with it, the ReverseProxy aborts an answer the cloud cut short,
	// rather than end it as if whole) and the address the connection arrived on.
	ctx := context.WithValue(f.base, http.ServerContextKey, f.hs)
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, c.LocalAddr())
	remote := c.RemoteAddr().String()
	br := bufio.NewReaderSize(c, 4<<10)
	bw := bufio.NewWriterSize(c, 4<<10)
	setDeadline(c, f.hs.ReadHeaderTimeout) // the first head, from the accept
	for first := true; ; first = false {
		req, ok := f.nextRequest(c, br, first)
		if !ok {
			break
		}
		if req == nil || !laneServes(req) {
			_ = c.SetReadDeadline(time.Time{})
			f.untrack(c)
			f.handoff.push(c.replay())
			return
		}
		c.stopRecording()
		req.RemoteAddr = remote
		if !f.serveRequest(ctx, c, bw, req) {
			break
		}
	}
	f.untrack(c)
	c.Close()
}

// nextRequest waits for the next request and reads its head, with net/http's bounds: the first
// head within ReadHeaderTimeout of the connection's accept, a later one within IdleTimeout (for
// its first byte) and then ReadHeaderTimeout; MaxHeaderBytes. It records the bytes read so a
// request can be handed over whole. A head the lane cannot read, it hands over (net/http answers
// 400 or 431 as it always did): nil, true then; false when the connection closed, timed out, or
// the lane is closing.
func (f *Lane) nextRequest(c *laneConn, br *bufio.Reader, first bool) (*http.Request, bool) {
	if !f.setIdle(c, true) {
		return nil, false
	}
	if !first {
		setDeadline(c, f.hs.IdleTimeout)
	}
	_, err := br.Peek(1)
	if !f.setIdle(c, false) || err != nil {
		return nil, false
	}
	if !first {
		setDeadline(c, f.hs.ReadHeaderTimeout)
	}
	buffered, _ := br.Peek(br.Buffered())
	max := f.hs.MaxHeaderBytes
	if max <= 0 {
		max = http.DefaultMaxHeaderBytes
	}
	c.record(buffered, max+4096) // net/http's bound and its slack
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, c.over || !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !isTimeout(err)
	}
	_ = c.SetReadDeadline(time.Time{})
	return req, true
}

// setDeadline gives c's reads d from now; none when d is zero (as net/http reads its timeouts).
func setDeadline(c net.Conn, d time.Duration) {
	var t time.Time
	if d > 0 {
		t = time.Now().Add(d)
	}
	_ = c.SetReadDeadline(t)
}

// laneServes reports whether the lane answers req itself: an HTTP/1.1 GET in origin form with a
// plain Host, no body, no upgrade and no expectation, that is neither a watch, a followed log nor
// a proxy subresource (long requests, whose end the client's going away must cause: net/http's
// server notices it). The query's keys are read decoded, as the apiserver reads them: "watch"
// or "follow" with any value, or none, goes to net/http.
func laneServes(r *http.Request) bool {
	if r.Method != http.MethodGet || r.ContentLength != 0 || len(r.TransferEncoding) > 0 || r.ProtoMajor != 1 || r.ProtoMinor < 1 {
		return false
	}
	if r.URL.Host != "" || r.Host == "" || strings.ContainsAny(r.Host, " \t/\\@?#") {
		return false // net/http answers an absolute URI without Host, a missing or odd Host 400
	}
	if r.Header.Get("Upgrade") != "" || r.Header.Get("Expect") != "" {
		return false
	}
	for seg := range strings.SplitSeq(r.URL.Path, "/") {
		if seg == "watch" || seg == "proxy" {
			return false
		}
	}
	raw := r.URL.RawQuery
	if !strings.Contains(raw, "watch") && !strings.Contains(raw, "follow") && !strings.Contains(raw, "%") {
		return true // neither key, however spelled: no second parse of the query on the hot path
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return false
	}
	_, watch := q["watch"]
	_, follow := q["follow"]
	return !watch && !follow
}

// serveRequest runs the handler on req and finishes its answer; false when the connection must
// close after it.
func (f *Lane) serveRequest(ctx context.Context, c *laneConn, bw *bufio.Writer, req *http.Request) (keep bool) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := newWriter(c, bw)
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				f.log.Error("proxy: handler panicked", "path", req.URL.Path, "panic", v)
			}
			keep = false
		}
	}()
	f.h.ServeHTTP(w, req.WithContext(rctx))
	return w.finish() && !req.Close
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
