package serve

import (
	"bytes"
	"io"
	"net/http"
)

// A write the offline proxy answers (kubelet's token requests, its node registration, its node's
// and pods' status, events) that the cloud leaves without an answer — the link was cut while it
// was on its way, or the hub learns it is offline meanwhile — is answered as offline instead of
// with a 503: the same answer it would have got a moment later. Its body is kept for that
// (bounded; a larger write gets the 503).

const maxFallbackBody = 128 << 10

// peekBody reads a request's body (at most maxFallbackBody) and leaves the request's body as it
// was. It returns nil when the body is larger.
func peekBody(r *http.Request) []byte {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength > maxFallbackBody {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxFallbackBody+1))
	r.Body = readCloser{io.MultiReader(bytes.NewReader(b), r.Body), r.Body}
	if err != nil || len(b) > maxFallbackBody {
		return nil
	}
	return b
}

type readCloser struct {
	io.Reader
	io.Closer
}

// writeFallback answers a write the cloud left unanswered from the offline proxy: a token request
// always (the kept token is the right answer either way), others when no cloud server is healthy.
// It reports whether it answered.
func (p *Pipeline) writeFallback(w http.ResponseWriter, q *proxyRequest) bool {
	if q.local == nil || q.kept == nil || !isTokenRequest(q.ri) && p.Cloud.Online() {
		return false
	}
	p.Metrics.Offline(q.ri.Verb)
	r := q.r.WithContext(q.r.Context())
	r.Body = io.NopCloser(bytes.NewReader(q.kept))
	p.Local.ServeHTTP(w, r, q.local)
	return true
}
