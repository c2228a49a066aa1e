package serve

import (
	"net"
	"net/http"

	"nodehub/hub/remote"
	"nodehub/wire"
)

// Whether a request is the node's own is decided here, once, as it arrives (the pipeline's accept
// step), from its addresses and its credential; every later step reads the answer (proxyRequest's
// from and id), and the hub API asks the same question (FromLoopback). The node's identity is lent
// only to the node itself: a request on the plain port, over loopback from loopback, without a
// credential of its own.

// origin is where a request on a proxy port comes from.
type origin struct {
	// loopback: it arrived on a loopback address of the hub; a request that did not must bring
	// its own bearer token.
	loopback bool
	// node: one of the node's own clients, on the plain port over loopback from loopback (with
	// a credential of its own or not): they have an in-flight budget of their own.
	node bool
	// asNode: a node's client without a credential of its own: forwarded with the node's identity.
	asNode bool
}

// originOf says where a request on a proxy port comes from.
func originOf(r *http.Request) origin {
	o := origin{loopback: arrivedOnLoopback(r)}
	o.node = o.loopback && r.TLS == nil && remoteLoopback(r)
	o.asNode = o.node && r.Header.Get("Authorization") == ""
	return o
}

// identity is the credential a request is forwarded with: the node's certificate only for the
// node's client without a credential of its own; anything else keeps its own (a bearer token, or
// none).
func (o origin) identity() remote.Identity {
	if o.asNode {
		return remote.Node
	}
	return remote.Passthrough
}

// FromLoopback reports whether a request arrived on a loopback address from a loopback address:
// the node itself (the hub API answers only it).
func FromLoopback(r *http.Request) bool { return arrivedOnLoopback(r) && remoteLoopback(r) }

// arrivedOnLoopback reports whether a request arrived on a loopback address of the hub.
func arrivedOnLoopback(r *http.Request) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr)
	return ok && local.IP.IsLoopback()
}

// remoteLoopback reports whether a request came from a loopback address.
func remoteLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// hasBearer reports whether an Authorization header carries a bearer token as the apiserver reads
// it (wire.BearerToken, the hub's one reading): what a request that is not the node's must bring.
// A header the apiserver would serve as anonymous ("Bearer  tok", two spaces) brings none.
func hasBearer(auth string) bool {
	_, ok := wire.BearerToken(auth)
	return ok
}
