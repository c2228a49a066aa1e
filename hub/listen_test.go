package hub

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"nodehub/pool"
)

// fakeListener hands out in-memory connections from the given remote addresses.
type fakeListener struct {
	conns chan net.Conn
}

type fakeConn struct {
	net.Conn
	remote net.Addr
	closed chan struct{}
}

func (c *fakeConn) RemoteAddr() net.Addr { return c.remote }
func (c *fakeConn) Close() error {
	select {
	case <-c.closed:
	default:
		close(c.closed)
	}
	return nil
}

func (l *fakeListener) Accept() (net.Conn, error) { return <-l.conns, nil }
func (l *fakeListener) Close() error              { return nil }
func (l *fakeListener) Addr() net.Addr            { return &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 10268} }

func (l *fakeListener) dial(ip string) *fakeConn {
	c := &fakeConn{remote: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}, closed: make(chan struct{})}
	l.conns <- c
	return c
}

// A pod cannot hold more than MaxConnsPerHost connections, pods together not more than
// MaxConns; a closed connection frees its slot; loopback clients are never limited.
func TestConnectionsFromPodsAreBounded(t *testing.T) {
	fl := &fakeListener{conns: make(chan net.Conn, 1)}
	refused := 0
	ln := limitConns(fl, true, func() { refused++ })
	accept := func(ip string) (*fakeConn, net.Conn) {
		c := fl.dial(ip)
		got := make(chan net.Conn, 1)
		go func() {
			a, _ := ln.Accept()
			got <- a
		}()
		select {
		case a := <-got:
			return c, a
		case <-c.closed:
			// Refused: close the Accept goroutine's wait with a loopback connection.
			fl.dial("127.0.0.1")
			<-got
			return c, nil
		case <-time.After(30 * time.Second):
			t.Fatal("Accept hung")
		}
		return nil, nil
	}
	var held []net.Conn
	for i := 0; i < MaxConnsPerHost; i++ {
		if _, a := accept("10.244.0.5"); a == nil {
			t.Fatalf("connection %d of one pod refused", i)
		} else {
			held = append(held, a)
		}
	}
	if _, a := accept("10.244.0.5"); a != nil || refused != 1 {
		t.Fatalf("connection %d of one pod accepted", MaxConnsPerHost+1)
	}
	_ = held[0].Close()
	_ = held[0].Close() // twice: one slot
	if _, a := accept("10.244.0.5"); a == nil {
		t.Fatal("a freed slot was not given again")
	}
	if _, a := accept("10.244.0.5"); a != nil {
		t.Fatal("a second close freed a second slot")
	}
	for i := 0; i < 200; i++ {
		if _, a := accept("127.0.0.1"); a == nil {
			t.Fatal("a loopback connection refused")
		}
	}
	n := MaxConnsPerHost
	for i := 0; n < MaxConns; i++ {
		if _, a := accept(net.IPv4(10, 244, 1, byte(i)).String()); a == nil {
			t.Fatalf("pod %d refused with %d connections open", i, n)
		}
		n++
	}
	if _, a := accept("10.244.9.9"); a != nil {
		t.Fatalf("connection %d accepted", MaxConns+1)
	}
}

// The pool port keeps the bounds of the other ports, for every address (no client of the node's
// own comes there): 300 idle connections that never start their TLS handshake get MaxConnsPerHost
// slots, the rest are closed at once, and the held ones are closed at the handshake's deadline
// (issue 23: 20,000 such connections took the hub to 325 MB).
func TestPoolPortConnectionsAreBounded(t *testing.T) {
	cloud := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":404,"reason":"NotFound"}`)
	}))
	defer cloud.Close()
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.Addr().String()
	probe.Close()
	s, err := New(Config{Servers: []string{cloud.URL}, Log: slog.New(slog.DiscardHandler),
		NodePoolName: "pool-a", ServingCert: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return nil, errors.New("no handshake gets this far")
		},
		Pool: PoolConfig{Resources: []pool.Resource{{Version: "v1", Resource: "services"}}, Mode: pool.ModeLease, Addr: addr}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	var first net.Conn
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if first, err = net.Dial("tcp", addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool port did not listen: %v", err)
		}
	}
	conns := []net.Conn{first}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	const n = 300
	for len(conns) < n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	refused := func() float64 { return s.metrics.refusedConns.Value("pool") }
	for deadline := time.Now().Add(30 * time.Second); refused() < n-MaxConnsPerHost; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d idle connections to the pool port from one address: %v refused, want %d", n, refused(), n-MaxConnsPerHost)
		}
	}
	if got := refused(); got != n-MaxConnsPerHost {
		t.Fatalf("%v connections refused, want %d", got, n-MaxConnsPerHost)
	}
	// The held ones are closed at the handshake's deadline: every connection ends.
	var wg sync.WaitGroup
	var open atomic.Int32
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(time.Now().Add(ReadHeaderTimeout + 30*time.Second))
			if _, err := c.Read(make([]byte, 1)); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					open.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if open.Load() > 0 {
		t.Fatalf("%d connections that never started their TLS handshake were still open after %v", open.Load(), ReadHeaderTimeout+30*time.Second)
	}
}
