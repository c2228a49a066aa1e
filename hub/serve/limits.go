package serve

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"nodehub/wire"
)

// upgradeSubresources are the pod subresources whose upgraded connections (SPDY, websocket) are
// long-running by nature: they are not counted against the in-flight limit.
var upgradeSubresources = map[string]bool{"exec": true, "attach": true, "portforward": true}

// isUpgrade reports whether a request is a real connection upgrade: an Upgrade header on pods'
// exec, attach or portforward. An Upgrade header anywhere else is counted like any request.
func isUpgrade(r *http.Request, ri *wire.RequestInfo) bool {
	return r.Header.Get("Upgrade") != "" && ri.IsResource && ri.Group == "" && ri.Resource == "pods" && upgradeSubresources[ri.Subresource]
}

// limitBody puts a deadline on reading the request body (Config.BodyTimeout), lifted once the
// body is read: a client trickling a body in does not hold its in-flight slot for long. Nothing
// for requests without a body and for upgrades (their connection outlives the request).
func (p *Pipeline) limitBody(w http.ResponseWriter, r *http.Request, ri *wire.RequestInfo) *timedBody {
	if r.Body == nil || r.Body == http.NoBody || isUpgrade(r, ri) || r.ContentLength == 0 {
		return nil
	}
	d := p.BodyTimeout
	if d <= 0 {
		d = DefaultBodyTimeout
	}
	rc := http.NewResponseController(w)
	deadline := time.Now().Add(d)
	if rc.SetReadDeadline(deadline) != nil {
		return nil
	}
	tb := &timedBody{ReadCloser: r.Body, rc: rc, deadline: deadline}
	r.Body = tb
	return tb
}

// timedBody lifts the connection's read deadline when the body has been read.
type timedBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	deadline time.Time
	done     atomic.Bool
	timedOut atomic.Bool
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.lift()
	} else if err != nil && !time.Now().Before(b.deadline) {
		b.timedOut.Store(true)
	}
	return n, err
}

func (b *timedBody) Close() error {
	b.lift()
	return b.ReadCloser.Close()
}

// lift clears the read deadline (the server then watches the connection for the client going away).
func (b *timedBody) lift() {
	if b.done.CompareAndSwap(false, true) && !b.timedOut.Load() {
		_ = b.rc.SetReadDeadline(time.Time{})
	}
}

// expired reports whether reading the body failed on its deadline.
func (b *timedBody) expired() bool { return b.timedOut.Load() }

// stripIdentityHeaders removes the headers that would let a client speak for someone else
// (impersonation, and the front-proxy's X-Remote-User/Group/Extra) from a request forwarded with
// the node's identity.
func stripIdentityHeaders(h http.Header) {
	for k := range h {
		if hasPrefixFold(k, "Impersonate-") || hasPrefixFold(k, "X-Remote-") {
			delete(h, k)
		}
	}
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// closeUnread marks the connection of a request refused before its body was read to be closed
// after the answer: net/http would otherwise read up to 256 KiB of the body first, for as long
// as the client takes to trickle it in, before answering. (HTTP/2 answers at once: a stream's
// unread body does not hold it, and "Connection: close" there would end the client's other streams.)
func closeUnread(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 && r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		w.Header().Set("Connection", "close")
	}
}
