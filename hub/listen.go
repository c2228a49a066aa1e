package hub

import (
	"context"
	"net"
	"sync"
)

// listen opens a TCP listener; with freebind it may bind an address the node does not hold yet
// (the dummy link's, before the link is made or while it cannot be), and starts answering on it
// as soon as the address appears.
func listen(ctx context.Context, addr string, freebind bool) (net.Listener, error) {
	lc := net.ListenConfig{}
	if freebind {
		lc.Control = setFreebind
	}
	return lc.Listen(ctx, "tcp", addr)
}

// Connections a listener keeps open for clients that are not on the node itself (pods, and on the
// pool port other nodes): at most MaxConnsPerHost from one address and MaxConns in all. Past
// either, a new connection is closed at once. Loopback clients (the node's own) are not limited
// on the ports the node's clients use.
const (
	MaxConnsPerHost = 32
	MaxConns        = 256
)

// limitConns wraps a listener with the MaxConns and MaxConnsPerHost bounds (for loopback clients
// too unless loopbackFree); refused counts the connections it closed.
func limitConns(ln net.Listener, loopbackFree bool, refused func()) net.Listener {
	return &connLimit{Listener: ln, loopbackFree: loopbackFree, refused: refused, hosts: map[string]int{}}
}

type connLimit struct {
	net.Listener
	loopbackFree bool
	refused      func()

	mu    sync.Mutex
	n     int
	hosts map[string]int
}

func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host := hostOf(c.RemoteAddr())
		if ip := net.ParseIP(host); l.loopbackFree && ip != nil && ip.IsLoopback() {
			return c, nil
		}
		l.mu.Lock()
		if l.n >= MaxConns || l.hosts[host] >= MaxConnsPerHost {
			l.mu.Unlock()
			_ = c.Close()
			if l.refused != nil {
				l.refused()
			}
			continue
		}
		l.n++
		l.hosts[host]++
		l.mu.Unlock()
		return &limitedConn{Conn: c, release: func() { l.release(host) }}, nil
	}
}

func (l *connLimit) release(host string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n--
	if l.hosts[host]--; l.hosts[host] <= 0 {
		delete(l.hosts, host)
	}
}

func hostOf(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	h, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return h
}

// limitedConn gives its slot back when closed (once).
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
