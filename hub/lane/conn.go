package lane

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
)

// laneConn is a lane's connection: while a request's head is read it records the bytes read
// (to hand the request over whole) and bounds them.
type laneConn struct {
	net.Conn
	rec   []byte
	limit int // bytes a head may still read; < 0: not recording
	over  bool
}

var errHeadTooLarge = errors.New("hub: request head too large")

func (c *laneConn) Read(p []byte) (int, error) {
	if c.limit < 0 {
		return c.Conn.Read(p)
	}
	if c.limit == 0 {
		c.over = true // net/http reads on and answers 431
		return 0, errHeadTooLarge
	}
	if len(p) > c.limit {
		p = p[:c.limit]
	}
	n, err := c.Conn.Read(p)
	c.limit -= n
	c.rec = append(c.rec, p[:n]...)
	return n, err
}

// record starts recording a head, from the bytes already buffered.
func (c *laneConn) record(buffered []byte, limit int) {
	c.rec = append(c.rec[:0], buffered...)
	c.limit = limit - len(buffered)
	if c.limit < 0 {
		c.limit = 0
	}
	c.over = false
}

// replay is c handed over: the current request's bytes (everything read since its head began,
// which holds what the lane's reader buffered), then the connection's.
func (c *laneConn) replay() net.Conn {
	rec := c.rec
	c.rec, c.limit = nil, -1
	return &replayConn{Conn: c.Conn, r: io.MultiReader(bytes.NewReader(rec), c.Conn)}
}

// stopRecording ends a head's recording: the body and the next request are read plainly.
func (c *laneConn) stopRecording() { c.rec, c.limit = c.rec[:0], -1 }

// replayConn reads bytes put back before its connection's.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// connQueue is a net.Listener whose connections are pushed to it (the lane's handed-over ones).
type connQueue struct {
	addr   net.Addr
	ch     chan net.Conn
	done   chan struct{}
	closed sync.Once
}

func newConnQueue(addr net.Addr) *connQueue {
	return &connQueue{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

func (q *connQueue) push(c net.Conn) {
	select {
	case q.ch <- c:
	case <-q.done:
		c.Close()
	}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.ch:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) Close() error {
	q.closed.Do(func() { close(q.done) })
	return nil
}

func (q *connQueue) Addr() net.Addr { return q.addr }
