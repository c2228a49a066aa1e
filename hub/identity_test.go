package hub

import (
	"net/http"
	"strings"
	"testing"

	"nodehub/hub/identity"
	"nodehub/hub/remote"
	"nodehub/wire"
)

// A node-identity client cannot name another owner's cache through its User-Agent: "@" only ever
// separates a component from a credential.
func TestCacheOwnerOfNodeClientCarriesNoCredential(t *testing.T) {
	p := &pipeline{}
	r, _ := http.NewRequest(http.MethodGet, "http://hub/api/v1/pods", nil)
	ri := &wire.RequestInfo{Component: "coredns@0123456789abcdef"}
	if own, _ := p.cacheOwner(ri, r, remote.Node); strings.Contains(own, "@") {
		t.Fatalf("node client's owner %q names a credential", own)
	}
	r.Header.Set("Authorization", "Bearer x")
	p.ids = identity.Open(t.TempDir(), nil)
	if own, _ := p.cacheOwner(ri, r, remote.Passthrough); strings.Count(own, "@") != 1 {
		t.Fatalf("owner %q: want exactly one @", own)
	}
}
