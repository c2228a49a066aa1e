package hub

import (
	"net"
	"testing"
	"time"
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
	ln := limitConns(fl, func() { refused++ })
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
