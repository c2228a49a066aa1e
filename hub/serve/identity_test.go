package serve

import (
	"encoding/base64"
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
	p := &Pipeline{}
	r, _ := http.NewRequest(http.MethodGet, "http://hub/api/v1/pods", nil)
	ri := &wire.RequestInfo{Component: "coredns@0123456789abcdef"}
	if own, _ := p.cacheOwner(ri, r, remote.Node); strings.Contains(own, "@") {
		t.Fatalf("node client's owner %q names a credential", own)
	}
	r.Header.Set("Authorization", "Bearer x")
	p.IDs = identity.Open(t.TempDir(), nil)
	if own, _ := p.cacheOwner(ri, r, remote.Passthrough); strings.Count(own, "@") != 1 {
		t.Fatalf("owner %q: want exactly one @", own)
	}
}

func TestVouchedTokenReadsItsServiceAccountsCache(t *testing.T) {
	p := &Pipeline{Deps: Deps{IDs: identity.Open("", nil)}}
	enc := base64.RawURLEncoding.EncodeToString
	tok := enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(`{"sub":"system:serviceaccount:ns:app"}`)) + ".sig"
	p.IDs.Vouch(tok)
	own, c := p.cacheOwner(&wire.RequestInfo{Component: "app"}, &http.Request{Header: http.Header{"Authorization": {"Bearer " + tok}}}, remote.Passthrough)
	if !p.IDs.Vouched(c) || own == "app@"+c.Hash {
		t.Fatalf("a token the cloud issued is not known as its ServiceAccount's: owner %q", own)
	}
}
