package lane

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// laneUnderTest serves h on a loopback port through a fast lane and counts the connections.
type laneUnderTest struct {
	addr     string
	accepted atomic.Int32
	lane     *Lane
	ln       net.Listener
	done     chan error
}

type countingListener struct {
	net.Listener
	n *atomic.Int32
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func startLane(t *testing.T, h http.HandlerFunc) *laneUnderTest {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &laneUnderTest{addr: ln.Addr().String(), done: make(chan error, 1)}
	u.ln = countingListener{ln, &u.accepted}
	hs := &http.Server{Handler: h, MaxHeaderBytes: 32 << 10, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 90 * time.Second}
	u.lane = New(context.Background(), hs, slog.New(slog.DiscardHandler), ln.Addr())
	go func() { u.done <- u.lane.Serve(u.ln) }()
	t.Cleanup(func() { u.stop(t) })
	return u
}

func (u *laneUnderTest) stop(t *testing.T) {
	if u.ln.Close() != nil {
		return // stopped already
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u.lane.Shutdown(ctx)
	<-u.done
}

// onLane reports whether w is the lane's writer (else net/http's: the request was handed over).
func onLane(w http.ResponseWriter) string {
	if _, ok := w.(*writer); ok {
		return "lane"
	}
	return "net/http"
}

// The lane answers GETs itself on one kept connection — a small body with a Content-Length, a
// sized one as declared, a large or flushed one in chunks, a 204 without a body — and hands a
// request with a body over to net/http, the request whole, with the requests after it on that
// connection.
func TestLaneServesGetsAndHandsTheRestOver(t *testing.T) {
	var mu sync.Mutex
	var servedBy []string
	u := startLane(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		servedBy = append(servedBy, r.Method+" "+r.URL.Path+" "+onLane(w))
		mu.Unlock()
		switch r.URL.Path {
		case "/sized":
			w.Header().Set("Content-Length", "5")
			_, _ = io.WriteString(w, "sized")
		case "/big":
			_, _ = io.WriteString(w, strings.Repeat("b", 100<<10))
		case "/flush":
			_, _ = io.WriteString(w, "a")
			http.NewResponseController(w).Flush()
			_, _ = io.WriteString(w, "b")
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		case "/echo":
			body, _ := io.ReadAll(r.Body)
			_, _ = w.Write(body)
		default:
			_, _ = io.WriteString(w, "{}")
		}
	})
	cl := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, DisableCompression: true}}
	get := func(method, path, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+u.addr+path, strings.NewReader(body))
		if body == "" {
			req.Body = nil
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}
	checks := []struct {
		method, path, body, want string
		length                   int64 // -1: chunked
	}{
		{"GET", "/small", "", "{}", 2},
		{"GET", "/sized", "", "sized", 5},
		{"GET", "/big", "", strings.Repeat("b", 100<<10), -1},
		{"GET", "/flush", "", "ab", -1},
		{"GET", "/empty", "", "", 0},
		{"POST", "/echo", "hello", "hello", 5},
		{"GET", "/after", "", "{}", 2},
	}
	for _, c := range checks {
		resp, got := get(c.method, c.path, c.body)
		if got != c.want || resp.ContentLength != c.length && resp.StatusCode != http.StatusNoContent {
			t.Errorf("%s %s: %d bytes, Content-Length %d; want %d bytes, %d", c.method, c.path, len(got), resp.ContentLength, len(c.want), c.length)
		}
	}
	if n := u.accepted.Load(); n != 1 {
		t.Errorf("%d connections, want 1 kept", n)
	}
	want := []string{"GET /small lane", "GET /sized lane", "GET /big lane", "GET /flush lane", "GET /empty lane", "POST /echo net/http", "GET /after net/http"}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(servedBy, ", ") != strings.Join(want, ", ") {
		t.Errorf("served: %q\nwant    %q", servedBy, want)
	}
}

// rawExchange sends raw bytes on a new connection and returns the answer's status line.
func rawExchange(t *testing.T, addr, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	go func() { _, _ = io.WriteString(c, raw) }()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("no answer to %.40q: %v", raw, err)
	}
	return strings.TrimSpace(line)
}

// A head too large gets 431 and one that is not HTTP gets 400, as from net/http; a watch and an
// upgrade go to net/http, which ends the watch when its client goes away and lets the upgrade
// take the connection.
func TestLaneRefusesBadHeadsAndHandsOverLongRequests(t *testing.T) {
	watchEnded := make(chan struct{})
	u := startLane(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Query().Get("watch") == "true":
			w.WriteHeader(http.StatusOK)
			http.NewResponseController(w).Flush()
			<-r.Context().Done()
			close(watchEnded)
		case r.Header.Get("Upgrade") != "":
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("upgrade on %s: %v", onLane(w), err)
				return
			}
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\nConnection: Upgrade\r\n\r\n")
			_ = brw.Flush()
			c.Close()
		default:
			_, _ = io.WriteString(w, "{}")
		}
	})
	big := "GET / HTTP/1.1\r\nHost: x\r\nUser-Agent: " + strings.Repeat("a", 1<<20) + "\r\n\r\n"
	if got := rawExchange(t, u.addr, big); !strings.HasPrefix(got, "HTTP/1.1 431") {
		t.Errorf("1 MiB header: %q, want 431", got)
	}
	if got := rawExchange(t, u.addr, "NOT HTTP\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 400") {
		t.Errorf("garbage: %q, want 400", got)
	}
	if got := rawExchange(t, u.addr, "GET /x HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 101") {
		t.Errorf("upgrade: %q, want 101", got)
	}

	c, err := net.Dial("tcp", u.addr)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(c, "GET /api/v1/pods?watch=true HTTP/1.1\r\nHost: x\r\n\r\n")
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.Contains(line, "200") {
		t.Fatalf("watch: %q %v", line, err)
	}
	c.Close()
	select {
	case <-watchEnded:
	case <-time.After(30 * time.Second):
		t.Fatal("the watch's handler did not end when its client went away")
	}
}

// Shutdown closes idle connections at once and lets a request being served finish its answer.
func TestLaneShutdownFinishesTheAnswerInFlight(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	u := startLane(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			<-release
		}
		_, _ = io.WriteString(w, "done")
	})
	idle, err := net.Dial("tcp", u.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	answer := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + u.addr + "/slow")
		if err != nil {
			answer <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answer <- string(b)
	}()
	<-started
	stopped := make(chan struct{})
	go func() { u.stop(t); close(stopped) }()
	_ = idle.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("idle connection at shutdown: %v, want EOF", err)
	}
	close(release)
	if got := <-answer; got != "done" {
		t.Errorf("answer in flight at shutdown: %q", got)
	}
	<-stopped
}

// A request without a Host, or with two, is net/http's to refuse (400), as it always was.
func TestLaneHandsOverWhatNetHTTPRefuses(t *testing.T) {
	u := startLane(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, onLane(w)) })
	for _, raw := range []string{
		"GET / HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	} {
		if got := rawExchange(t, u.addr, raw); !strings.HasPrefix(got, "HTTP/1.1 400") {
			t.Errorf("%q: %q, want 400", raw, got)
		}
	}
}

// A GET the lane does not answer itself: watches and followed logs however their keys are
// spelled (the apiserver reads them decoded, and a key without a value as true), proxy
// subresources, HTTP/2 heads, absolute URIs.
func TestLaneServesOnlyShortGets(t *testing.T) {
	for raw, want := range map[string]bool{
		"GET /api/v1/pods?limit=500 HTTP/1.1\r\nHost: x\r\n\r\n":                     true,
		"GET /api/v1/pods?watch=true HTTP/1.1\r\nHost: x\r\n\r\n":                    false,
		"GET /api/v1/pods?%77atch=true HTTP/1.1\r\nHost: x\r\n\r\n":                  false,
		"GET /api/v1/pods?watch HTTP/1.1\r\nHost: x\r\n\r\n":                         false,
		"GET /api/v1/namespaces/a/pods/b/log?follow HTTP/1.1\r\nHost: x\r\n\r\n":     false,
		"GET /api/v1/namespaces/a/pods/b/log?%66ollow=1 HTTP/1.1\r\nHost: x\r\n\r\n": false,
		"GET /api/v1/watch/pods HTTP/1.1\r\nHost: x\r\n\r\n":                         false,
		"GET /api/v1/namespaces/a/services/b/proxy/c HTTP/1.1\r\nHost: x\r\n\r\n":    false,
		"GET /api/v1/pods HTTP/2.0\r\nHost: x\r\n\r\n":                               false,
		"GET http://x/api/v1/pods HTTP/1.1\r\n\r\n":                                  false,
	} {
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		if got := laneServes(req); got != want {
			t.Errorf("%q: the lane serves it: %v, want %v", raw, got, want)
		}
	}
}

// An answer the cloud cuts short reaches the client as cut short (the ReverseProxy aborts it: the
// lane's requests carry the server, as net/http's do), never as a whole chunked answer.
func TestLaneAnswerCutShortIsNotWhole(t *testing.T) {
	cloud := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, strings.Repeat("x", 10<<10))
		http.NewResponseController(w).Flush() // chunked: no length tells the client it is short
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			c.Close()
		}
	}))
	defer cloud.Close()
	target, _ := url.Parse(cloud.URL)
	u := startLane(t, httputil.NewSingleHostReverseProxy(target).ServeHTTP)
	resp, err := http.Get("http://" + u.addr + "/api/v1/pods")
	if err != nil {
		return // cut before the head: as good
	}
	defer resp.Body.Close()
	if b, err := io.ReadAll(resp.Body); err == nil {
		t.Fatalf("%d bytes of an answer cut short read as whole", len(b))
	}
}

// A connection that sends nothing is closed after ReadHeaderTimeout from its accept, not after
// IdleTimeout (the wait between requests).
func TestLaneFirstRequestHasTheHeaderTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: 100 * time.Millisecond, IdleTimeout: time.Hour}
	l := New(context.Background(), hs, slog.New(slog.DiscardHandler), ln.Addr())
	done := make(chan error, 1)
	go func() { done <- l.Serve(ln) }()
	defer func() {
		ln.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		l.Shutdown(ctx)
		<-done
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second)) // far past the header timeout, far short of the idle one
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a silent new connection: %v, want closed by the hub", err)
	}
}

// Headers changed after WriteHeader are not sent (as net/http), and a Content-Length that is not
// a number is dropped: the answer's framing stays whole.
func TestLaneHeadIsWhatWriteHeaderSaw(t *testing.T) {
	u := startLane(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bad" {
			w.Header().Set("Content-Length", "abc")
		}
		w.WriteHeader(http.StatusOK)
		w.Header().Set("Content-Length", "7")
		_, _ = io.WriteString(w, "hello")
	})
	for _, p := range []string{"/late", "/bad", "/late"} {
		resp, err := http.Get("http://" + u.addr + p)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(b) != "hello" {
			t.Errorf("%s: %q, %v; want hello", p, b, err)
		}
	}
}

// flakyListener fails its first Accepts with a temporary error (out of descriptors).
type flakyListener struct {
	net.Listener
	fails atomic.Int32
}

type tempErr struct{}

func (tempErr) Error() string   { return "too many open files" }
func (tempErr) Timeout() bool   { return false }
func (tempErr) Temporary() bool { return true }

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, tempErr{}
	}
	return l.Listener.Accept()
}

// A temporary accept failure is waited out, as net/http's server does: the port keeps serving.
func TestLaneWaitsOutATemporaryAcceptFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &flakyListener{Listener: ln}
	fl.fails.Store(3)
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })}
	l := New(context.Background(), hs, slog.New(slog.DiscardHandler), ln.Addr())
	done := make(chan error, 1)
	go func() { done <- l.Serve(fl) }()
	cl := &http.Client{Timeout: 30 * time.Second} // far past the waits (5 + 10 + 20 ms)
	resp, err := cl.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatalf("after temporary accept failures: %v", err)
	}
	resp.Body.Close()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l.Shutdown(ctx)
	if err := <-done; err == nil {
		t.Error("Serve returned no error for a closed listener")
	}
}
