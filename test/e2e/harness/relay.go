package harness

import (
	"net"
	"sync"
	"sync/atomic"
)

// Relay is a TCP relay between nodehub and one kube-apiserver that a test can cut for real:
// refuse new connections (and reset open ones), or black-hole everything (connections are
// accepted and kept open but no byte goes through — the cellular link that stopped passing
// packets).
type Relay struct {
	Addr   string
	target string

	mu    sync.Mutex
	cond  *sync.Cond
	ln    net.Listener
	mode  int
	conns map[net.Conn]bool

	// FromServer and ToServer count the bytes relayed in each direction: what the cloud sent (the
	// cloud-link cost nodehub tries to cut) and what it received.
	FromServer, ToServer atomic.Int64
	// HeldConns counts the connections accepted while black-holed, and Swallowed the bytes nodehub
	// sent into the black hole on them (what probing a dead link costs).
	HeldConns, Swallowed atomic.Int64
}

const (
	relayPass = iota
	relayRefuse
	relayBlackHole
)

// NewRelay starts a relay on a free loopback port (FreePort's) to target (host:port).
func NewRelay(target string) (*Relay, error) {
	r := &Relay{target: target, conns: map[net.Conn]bool{}}
	r.cond = sync.NewCond(&r.mu)
	// Below the ephemeral range: Refuse closes the listener and Pass opens it again on the same
	// port, which an outgoing connection must not take in between.
	ln, err := Listen()
	if err != nil {
		return nil, err
	}
	r.Addr, r.ln = ln.Addr().String(), ln
	go r.accept(ln)
	return r, nil
}

func (r *Relay) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		r.conns[c] = true
		r.mu.Unlock()
		go r.pipe(c)
	}
}

func (r *Relay) pipe(c net.Conn) {
	defer r.drop(c)
	r.mu.Lock()
	held := r.mode == relayBlackHole
	r.mu.Unlock()
	if held {
		// Nothing goes through until the link returns, and that resets this connection: read and
		// count what is sent into the hole until then.
		r.HeldConns.Add(1)
		buf := make([]byte, 4<<10)
		for {
			n, err := c.Read(buf)
			r.Swallowed.Add(int64(n))
			if err != nil {
				return
			}
		}
	}
	if !r.wait() {
		return
	}
	up, err := net.Dial("tcp", r.target)
	if err != nil {
		return
	}
	r.mu.Lock()
	r.conns[up] = true
	r.mu.Unlock()
	defer r.drop(up)
	done := make(chan struct{}, 2)
	go func() { r.copy(up, c, &r.ToServer); done <- struct{}{} }()
	go func() { r.copy(c, up, &r.FromServer); done <- struct{}{} }()
	<-done
}

// copy forwards bytes while the relay passes them, holds them while it is black-holed.
func (r *Relay) copy(dst, src net.Conn, count *atomic.Int64) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !r.wait() {
				return
			}
			w, werr := dst.Write(buf[:n])
			count.Add(int64(w))
			if werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// wait blocks while the relay is black-holed; false once it refuses.
func (r *Relay) wait() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.mode == relayBlackHole {
		r.cond.Wait()
	}
	return r.mode == relayPass
}

func (r *Relay) drop(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
	c.Close()
}

// Refuse closes the listener (new connections are refused) and resets open connections.
func (r *Relay) Refuse() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mode = relayRefuse
	if r.ln != nil {
		r.ln.Close()
		r.ln = nil
	}
	for c := range r.conns {
		c.Close()
	}
	r.cond.Broadcast()
}

// BlackHole lets connections in but no byte through, in either direction.
func (r *Relay) BlackHole() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mode = relayBlackHole
	return r.listenLocked()
}

// Pass restores the link. Connections that were black-holed are reset (their peers gave up).
func (r *Relay) Pass() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mode == relayBlackHole {
		for c := range r.conns {
			c.Close()
		}
	}
	r.mode = relayPass
	r.cond.Broadcast()
	return r.listenLocked()
}

func (r *Relay) listenLocked() error {
	if r.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", r.Addr)
	if err != nil {
		return err
	}
	r.ln = ln
	go r.accept(ln)
	return nil
}

// Close stops the relay and resets its connections.
func (r *Relay) Close() { r.Refuse() }

// URL is the relay as an https server address.
func (r *Relay) URL() string { return "https://" + r.Addr }
