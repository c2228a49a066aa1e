package remote

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// h1Server is a TLS test server that counts the connections it accepted and those open.
type h1Server struct {
	*httptest.Server
	accepted, open atomic.Int32
	mu             sync.Mutex
	conns          []net.Conn
}

func newH1Server(t *testing.T, h http.HandlerFunc) (*h1Server, *Backend) {
	t.Helper()
	s := &h1Server{}
	s.Server = httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(c net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.accepted.Add(1)
			s.open.Add(1)
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
		case http.StateClosed, http.StateHijacked:
			s.open.Add(-1)
		}
	}
	s.StartTLS()
	t.Cleanup(s.Close)
	pool := x509.NewCertPool()
	pool.AddCert(s.Certificate())
	b, err := NewBackend(s.URL, tlsCreds{pool, clientCert(t)}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return s, b
}

// closeAll closes every connection the server accepted (as a server does with idle ones).
func (s *h1Server) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
}

func h1Get(t *testing.T, b *Backend, ctx context.Context, path string) (*http.Response, error) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, path, nil)
	return b.RoundTrip(Route{Identity: Node}, req)
}

func h1Read(t *testing.T, b *Backend, path string) string {
	t.Helper()
	resp, err := h1Get(t, b, context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// waitFor waits (up to a generous bound) until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// GETs read to their end share one kept connection, whatever their bodies' framing (sized,
// chunked, empty); the server closing it while idle costs the next GET nothing but a new
// connection (sent again, answered); a body closed unread closes its connection.
func TestH1GetsKeepOneConnection(t *testing.T) {
	s, b := newH1Server(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/chunked":
			_, _ = io.WriteString(w, "a")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "b")
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		case "/big":
			_, _ = io.WriteString(w, strings.Repeat("x", 1<<20))
		default:
			_, _ = io.WriteString(w, "{}")
		}
	})
	for _, p := range []string{"/a", "/chunked", "/empty", "/a", "/chunked"} {
		h1Read(t, b, p)
	}
	if got := h1Read(t, b, "/chunked"); got != "ab" {
		t.Fatalf("chunked body %q, want ab", got)
	}
	if n := s.accepted.Load(); n != 1 {
		t.Fatalf("%d connections for 6 sequential GETs, want 1", n)
	}

	s.closeAll() // the server ends the idle connection
	waitFor(t, "the server to close its connections", func() bool { return s.open.Load() == 0 })
	if got := h1Read(t, b, "/a"); got != "{}" {
		t.Fatalf("after the server closed the idle connection: %q", got)
	}
	if n := s.accepted.Load(); n != 2 {
		t.Fatalf("%d connections after the server closed the first, want 2", n)
	}

	resp, err := h1Get(t, b, context.Background(), "/big")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close() // unread: its connection cannot carry another request
	waitFor(t, "the unread answer's connection to close", func() bool { return s.open.Load() == 0 })
	h1Read(t, b, "/a")
	if n := s.accepted.Load(); n != 3 {
		t.Fatalf("%d connections, want 3 (a new one after the unread body)", n)
	}
}

// A GET whose context ends while it waits for the answer returns at once with the context's
// cause and leaves no connection behind; CloseIdleConnections closes the kept ones; requests
// with a body (and concurrent GETs) still work, and no more than h1MaxIdle connections stay.
func TestH1CancelCloseIdleAndBounds(t *testing.T) {
	release := make(chan struct{})
	s, b := newH1Server(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			_, _ = w.Write(body)
			return
		}
		time.Sleep(time.Millisecond)
		_, _ = io.WriteString(w, "{}")
	})
	defer close(release)
	cause := errors.New("given up")
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(50*time.Millisecond, func() { cancel(cause) })
	if _, err := h1Get(t, b, ctx, "/hang"); !errors.Is(err, cause) {
		t.Fatalf("cancelled GET: %v, want %v", err, cause)
	}
	waitFor(t, "the cancelled GET's connection to close", func() bool { return s.open.Load() == 0 })

	var wg sync.WaitGroup
	for i := 0; i < 3*h1MaxIdle; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h1Read(t, b, "/a")
		}()
	}
	wg.Wait()
	waitFor(t, "connections past the idle bound to close", func() bool { return s.open.Load() <= h1MaxIdle })

	req, _ := http.NewRequest(http.MethodPost, "/echo", strings.NewReader("hello"))
	resp, err := b.RoundTrip(Route{Identity: Node}, req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello" {
		t.Fatalf("POST answered %q", body)
	}

	b.CloseIdle()
	waitFor(t, "idle connections to close", func() bool { return s.open.Load() == 0 })
}

// An answer whose head never ends, or that sends informational answers without end, is an error
// at once (net/http's Transport's bounds: 10 MB, 5), not memory or a request held for good.
func TestH1BoundsTheAnswersHead(t *testing.T) {
	_, b := newH1Server(t, func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		if r.URL.Path == "/long" {
			_, _ = brw.WriteString("HTTP/1.1 200 OK\r\nX-Long: " + strings.Repeat("a", 11<<20))
		} else {
			for range 10 {
				_, _ = brw.WriteString("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n")
			}
		}
		_ = brw.Flush()
		_, _ = io.Copy(io.Discard, c) // the head never ends: held until the client goes
	})
	for _, p := range []string{"/long", "/hints"} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		resp, err := h1Get(t, b, ctx, p)
		late := ctx.Err() != nil
		cancel()
		switch {
		case err == nil:
			resp.Body.Close()
			t.Errorf("%s: answered %d, want an error", p, resp.StatusCode)
		case late:
			t.Errorf("%s: %v: held until the deadline, want refused at its bound", p, err)
		}
	}
}
