package lane

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"nodehub/wire"
)

// writer is the lane's http.ResponseWriter (lane.go): the head goes out with the
// first body bytes past laneHold, at the first flush, or at the end — with a Content-Length when
// the handler set one or the whole body was held, chunked otherwise. Like net/http's, it reaches
// http.ResponseController's Flush and deadlines; it cannot be hijacked (the lane serves no
// upgrade).
type writer struct {
	c      net.Conn
	bw     *bufio.Writer
	header http.Header // the handler's
	sent   http.Header // the head's: the handler's as WriteHeader found them

	status   int   // 0 until WriteHeader
	headSent bool  // the head is written
	chunked  bool  // the body goes in chunks
	declared int64 // the Content-Length the handler set; -1: none
	written  int64
	pending  []byte // body held while no Content-Length is known
	err      error  // a write to the client failed
}

// laneHold is the body a writer holds to answer with a Content-Length rather than in chunks.
const laneHold = 4 << 10

func newWriter(c net.Conn, bw *bufio.Writer) *writer {
	return &writer{c: c, bw: bw, header: make(http.Header, 8), declared: -1}
}

func (w *writer) Header() http.Header { return w.header }

func (w *writer) WriteHeader(code int) {
	if w.status != 0 {
		return
	}
	if code < 100 || code > 999 {
		panic("lane: invalid WriteHeader code " + strconv.Itoa(code)) // as net/http
	}
	if code < 200 { // informational: at once, and the real answer follows
		w.writeStatusLine(code)
		_ = w.header.Write(w.bw)
		_, _ = w.bw.WriteString("\r\n")
		w.note(w.bw.Flush())
		return
	}
	w.status = code
	// The head is what the headers are now (a change after WriteHeader is not sent, as with
	// net/http); a Content-Length that is not one number is not sent either.
	w.sent = w.header.Clone()
	if cl := w.sent["Content-Length"]; len(cl) > 0 {
		n, err := strconv.ParseInt(cl[0], 10, 64)
		if len(cl) == 1 && err == nil && n >= 0 {
			w.declared = n
		} else {
			delete(w.sent, "Content-Length")
		}
	}
}

func (w *writer) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if w.err != nil {
		return 0, w.err
	}
	if !w.headSent {
		if w.declared < 0 && len(w.pending)+len(p) <= laneHold {
			w.pending = append(w.pending, p...)
			return len(p), nil
		}
		w.chunked = w.declared < 0
		w.sendHead()
	}
	return w.writeBody(p)
}

// writeBody writes body bytes after the head, as a chunk when chunked.
func (w *writer) writeBody(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, w.err
	}
	if w.chunked {
		_, _ = w.bw.WriteString(strconv.FormatInt(int64(len(p)), 16))
		_, _ = w.bw.WriteString("\r\n")
	} else if w.written+int64(len(p)) > w.declared {
		return 0, http.ErrContentLength
	}
	n, err := w.bw.Write(p)
	w.written += int64(n)
	switch {
	case err != nil:
	case w.chunked:
		_, err = w.bw.WriteString("\r\n")
	case w.written == w.declared:
		// The whole answer: the client has it now, not after the handler's own ending
		// (metrics, the cache's part, the proxy's clean-up).
		err = w.bw.Flush()
	}
	w.note(err)
	return n, err
}

// sendHead writes the status line and headers, then the body held.
func (w *writer) sendHead() {
	w.headSent = true
	w.writeStatusLine(w.status)
	h := w.sent
	if _, ok := h["Date"]; !ok {
		_, _ = w.bw.WriteString("Date: " + time.Now().UTC().Format(http.TimeFormat) + "\r\n")
	}
	switch {
	case !bodyAllowed(w.status):
	case w.chunked:
		h.Del("Content-Length")
		_, _ = w.bw.WriteString("Transfer-Encoding: chunked\r\n")
	case w.declared < 0:
		w.declared = int64(len(w.pending))
		_, _ = w.bw.WriteString("Content-Length: " + strconv.Itoa(len(w.pending)) + "\r\n")
	}
	for k := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			delete(h, k) // no trailers on the lane's answers (the cloud's carry none)
		}
	}
	w.note(h.Write(w.bw))
	_, _ = w.bw.WriteString("\r\n")
	if len(w.pending) > 0 {
		p := w.pending
		w.pending = nil
		_, _ = w.writeBody(p)
	}
}

func (w *writer) writeStatusLine(code int) {
	text := http.StatusText(code)
	if text == "" {
		text = "status code " + strconv.Itoa(code)
	}
	_, _ = w.bw.WriteString("HTTP/1.1 " + strconv.Itoa(code) + " " + text + "\r\n")
}

// FlushError sends the head (chunked when no Content-Length is known) and what is written.
func (w *writer) FlushError() error {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headSent {
		w.chunked = w.declared < 0 && bodyAllowed(w.status)
		w.sendHead()
	}
	w.note(w.bw.Flush())
	return w.err
}

// Flush implements http.Flusher.
func (w *writer) Flush() { _ = w.FlushError() }

// SetReadDeadline and SetWriteDeadline are the connection's (http.ResponseController).
func (w *writer) SetReadDeadline(t time.Time) error  { return w.c.SetReadDeadline(t) }
func (w *writer) SetWriteDeadline(t time.Time) error { return w.c.SetWriteDeadline(t) }

// finish ends the answer after the handler returned; false when the connection cannot carry
// another request (a write failed, the body fell short of its Content-Length, or the answer
// said "Connection: close").
func (w *writer) finish() bool {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headSent {
		w.sendHead()
	}
	if w.chunked {
		_, err := w.bw.WriteString("0\r\n\r\n")
		w.note(err)
	}
	w.note(w.bw.Flush())
	short := bodyAllowed(w.status) && !w.chunked && w.written != w.declared
	return w.err == nil && !short && !wire.HeaderHasToken(w.sent.Get("Connection"), "close")
}

func (w *writer) note(err error) {
	if err != nil && w.err == nil {
		w.err = err
	}
}

// bodyAllowed reports whether an answer with this status carries a body.
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}
