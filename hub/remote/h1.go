package remote

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// h1Transport sends a GET over HTTP/1.1 keep-alive connections of its own, on the caller's
// goroutine: the request is written and its answer's headers read where RoundTrip was called, and
// the body is read where the caller reads it. net/http's Transport hands each request to a
// connection's writer goroutine and its answer back from a reader goroutine (three goroutine
// switches per request, each a thread wake-up on a small machine); this is the hop's least cost.
// Everything else — a request with a body, an upgrade — goes to next, a net/http Transport with
// the same TLS configuration. Unlike net/http's, an idle connection is not read while it waits in
// the pool: bytes a server sent after a whole answer (the apiserver sends none) would be read as
// the next request's answer; a connection is kept only when its answer ended with nothing more
// buffered.
type h1Transport struct {
	addr   string // host:port
	dialer *net.Dialer
	tls    *tls.Config // nil: plain HTTP
	next   *http.Transport

	mu   sync.Mutex
	idle []*h1Conn // most recently used last
}

// h1MaxIdle bounds the idle connections kept per transport (net/http's MaxIdleConnsPerHost here).
const h1MaxIdle = 8

// h1IdleTimeout closes a connection idle this long.
const h1IdleTimeout = 90 * time.Second

// h1HandshakeTimeout bounds a new connection's TLS handshake.
const h1HandshakeTimeout = 10 * time.Second

func newH1Transport(addr string, dialer *net.Dialer, tlsCfg *tls.Config, next *http.Transport) *h1Transport {
	t := &h1Transport{addr: addr, dialer: dialer, next: next}
	if tlsCfg != nil {
		t.tls = tlsCfg.Clone()
		t.tls.NextProtos = []string{"http/1.1"}
		if t.tls.ServerName == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				host = addr
			}
			t.tls.ServerName = host
		}
	}
	return t
}

// h1Conn is one keep-alive connection.
type h1Conn struct {
	raw  net.Conn  // closing it ends any read or write on conn
	conn net.Conn  // raw, or the TLS connection over it
	head headLimit // between conn and br: bounds an answer's head
	br   *bufio.Reader
	bw   *bufio.Writer
	idle *time.Timer // closes it after h1IdleTimeout in the pool
}

// RoundTrip implements http.RoundTripper.
func (t *h1Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet || req.Body != nil && req.Body != http.NoBody || req.ContentLength != 0 || req.Close || isUpgrade(req) {
		return t.next.RoundTrip(req)
	}
	ctx := req.Context()
	for {
		c, reused, err := t.get(ctx)
		if err != nil {
			return nil, err
		}
		resp, err := t.exchange(c, req)
		if err == nil {
			return resp, nil
		}
		// A kept connection the server closed while it was idle fails at once: once more on
		// a new one (a GET without a body is safe to send again).
		if !reused || ctx.Err() != nil {
			return nil, err
		}
	}
}

// exchange writes req on c and reads its answer's headers; the body returned gives c back when
// read to its end, and closes it otherwise. On error c is closed.
func (t *h1Transport) exchange(c *h1Conn, req *http.Request) (*http.Response, error) {
	stop := context.AfterFunc(req.Context(), func() { c.raw.Close() })
	resp, err := c.send(req)
	if err == nil && resp.StatusCode == http.StatusSwitchingProtocols {
		err = errors.New("remote: unexpected 101 answer to a GET")
	}
	if err != nil {
		stop()
		c.raw.Close()
		if cerr := req.Context().Err(); cerr != nil {
			return nil, context.Cause(req.Context())
		}
		return nil, err
	}
	b := &h1Body{t: t, c: c, body: resp.Body, stop: stop, keep: !resp.Close}
	if resp.Body == http.NoBody {
		b.finish(true)
		return resp, nil
	}
	resp.Body = b
	return resp, nil
}

// send writes req and reads the answer's head (past at most h1Max1xx informational ones but
// 101), bounded as net/http's Transport bounds it (h1MaxHead).
func (c *h1Conn) send(req *http.Request) (*http.Response, error) {
	if err := req.Write(c.bw); err != nil {
		return nil, err
	}
	if err := c.bw.Flush(); err != nil {
		return nil, err
	}
	c.head.left = h1MaxHead
	defer func() { c.head.left = -1 }()
	for range h1Max1xx + 1 {
		resp, err := http.ReadResponse(c.br, req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
	}
	return nil, errors.New("remote: too many 1xx answers")
}

// h1MaxHead and h1Max1xx are net/http's Transport's bounds on an answer's head: 10 MB
// (MaxResponseHeaderBytes's default, with what the reader buffered beyond it), 5 informational
// answers.
const (
	h1MaxHead = 10 << 20
	h1Max1xx  = 5
)

// headLimit fails reads past left bytes (none while left is negative: the body's reads).
type headLimit struct {
	r    io.Reader
	left int64
}

func (l *headLimit) Read(p []byte) (int, error) {
	if l.left < 0 {
		return l.r.Read(p)
	}
	if l.left == 0 {
		return 0, errors.New("remote: the answer's head is too large")
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// get takes the most recently used idle connection, or dials one.
func (t *h1Transport) get(ctx context.Context) (*h1Conn, bool, error) {
	t.mu.Lock()
	for len(t.idle) > 0 {
		c := t.idle[len(t.idle)-1]
		t.idle = t.idle[:len(t.idle)-1]
		if c.idle.Stop() { // else its idle timeout is closing it
			t.mu.Unlock()
			return c, true, nil
		}
	}
	t.mu.Unlock()
	c, err := t.dial(ctx)
	return c, false, err
}

func (t *h1Transport) dial(ctx context.Context) (*h1Conn, error) {
	raw, err := t.dialer.DialContext(ctx, "tcp", t.addr)
	if err != nil {
		return nil, err
	}
	c := &h1Conn{raw: raw, conn: raw}
	if t.tls != nil {
		tc := tls.Client(raw, t.tls)
		hctx, cancel := context.WithTimeout(ctx, h1HandshakeTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			raw.Close()
			return nil, err
		}
		c.conn = tc
	}
	c.head = headLimit{r: c.conn, left: -1}
	c.br = bufio.NewReaderSize(&c.head, 4<<10)
	c.bw = bufio.NewWriterSize(c.conn, 4<<10)
	return c, nil
}

// put keeps c for the next request, or closes it past h1MaxIdle.
func (t *h1Transport) put(c *h1Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.idle) >= h1MaxIdle {
		c.raw.Close()
		return
	}
	if c.idle == nil {
		c.idle = time.AfterFunc(h1IdleTimeout, func() { t.expire(c) })
	} else {
		c.idle.Reset(h1IdleTimeout)
	}
	t.idle = append(t.idle, c)
}

// expire closes c when it stayed idle h1IdleTimeout.
func (t *h1Transport) expire(c *h1Conn) {
	t.mu.Lock()
	for i, o := range t.idle {
		if o == c {
			t.idle = append(t.idle[:i], t.idle[i+1:]...)
			break
		}
	}
	t.mu.Unlock()
	c.raw.Close()
}

// CloseIdleConnections closes the idle connections (net/http's Transport's too).
func (t *h1Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, c := range idle {
		c.idle.Stop()
		c.raw.Close()
	}
	t.next.CloseIdleConnections()
}

// h1Body is an answer's body: read to its end, its connection goes back to the pool (when the
// server keeps it open and nothing more is buffered); closed before, the connection is closed.
type h1Body struct {
	t    *h1Transport
	c    *h1Conn
	body io.ReadCloser
	stop func() bool // ends the request context's watch over c
	keep bool
	done atomic.Bool
}

func (b *h1Body) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if err != nil {
		b.finish(err == io.EOF)
	}
	return n, err
}

func (b *h1Body) Close() error {
	b.finish(false)
	return nil
}

// finish gives the connection back after a whole body (ok) or closes it; once.
func (b *h1Body) finish(ok bool) {
	if !b.done.CompareAndSwap(false, true) {
		return
	}
	if b.stop() && ok && b.keep && b.c.br.Buffered() == 0 {
		b.t.put(b.c)
		return
	}
	b.c.raw.Close()
}
