package hub

import (
	"context"
	"net"
	"net/http"
	"strings"
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

// untrustedKey marks a request that arrived on a listener not bound to loopback.
type untrustedKey struct{}

// loopbackOrToken guards a proxy port: a request that arrived on a loopback address goes on as
// it is (without credentials of its own it may get the node's identity, see identityOf). One that
// arrived on any other address — the dummy link's, where pods arrive, or any address of a port
// bound wider — must bring its own bearer token, which goes to the cloud as is; without one it
// gets 401 and never the node's identity, whatever its source address.
func (s *Server) loopbackOrToken(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if local, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr); ok && local.IP.IsLoopback() {
			h.ServeHTTP(w, r)
			return
		}
		if !hasBearer(r.Header.Get("Authorization")) {
			s.unauthorized(w, r, "proxy", "nodehub: requests on this address must carry a bearer token (a ServiceAccount token); the node's identity is only lent over loopback")
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), untrustedKey{}, true)))
	})
}

func hasBearer(auth string) bool {
	const p = "bearer "
	return len(auth) > len(p) && strings.EqualFold(auth[:len(p)], p) && strings.TrimSpace(auth[len(p):]) != ""
}
