package serve

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"nodehub/hub/remote"
)

// Where a request comes from is decided once, from its addresses and credential: the node's
// identity only for the plain port over loopback from loopback without a credential of its own.
func TestOriginLendsTheNodeOnlyToTheNode(t *testing.T) {
	loopback := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 10261}
	dummy := &net.TCPAddr{IP: net.IPv4(169, 254, 2, 1), Port: 10261}
	for _, tc := range []struct {
		name   string
		local  *net.TCPAddr // nil: none known
		remote string
		auth   string
		tls    bool
		want   origin
		id     remote.Identity
		hubAPI bool // FromLoopback: the hub API answers it
	}{
		{"kubelet over loopback", loopback, "127.0.0.1:40000", "", false, origin{loopback: true, node: true, asNode: true}, remote.Node, true},
		{"a node's client with its own token", loopback, "127.0.0.1:40000", "Bearer t", false, origin{loopback: true, node: true}, remote.Passthrough, true},
		{"the secure port on loopback", loopback, "127.0.0.1:40000", "Bearer t", true, origin{loopback: true}, remote.Passthrough, true},
		{"to loopback from elsewhere", loopback, "10.0.0.7:40000", "", false, origin{loopback: true}, remote.Passthrough, false},
		{"a pod on the hub's link", dummy, "169.254.2.7:40000", "", false, origin{}, remote.Passthrough, false},
		{"no local address", nil, "127.0.0.1:40000", "", false, origin{}, remote.Passthrough, false},
		{"an unparsable remote address", loopback, "somewhere", "", false, origin{loopback: true}, remote.Passthrough, false},
	} {
		r := httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil)
		r.RemoteAddr = tc.remote
		if tc.local != nil {
			r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, tc.local))
		}
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		if tc.tls {
			r.TLS = &tls.ConnectionState{}
		}
		if got := originOf(r); got != tc.want || got.identity() != tc.id {
			t.Errorf("%s: %+v (%v), want %+v (%v)", tc.name, got, got.identity(), tc.want, tc.id)
		}
		if got := FromLoopback(r); got != tc.hubAPI {
			t.Errorf("%s: FromLoopback %v, want %v", tc.name, got, tc.hubAPI)
		}
	}
}
