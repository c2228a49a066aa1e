package hub

import (
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nodehub/hub/remote"
	"nodehub/wire"
)

func jwt(claims string) string {
	e := base64.RawURLEncoding.EncodeToString
	return e([]byte(`{"alg":"RS256"}`)) + "." + e([]byte(claims)) + "." + e([]byte("sig"))
}

func TestCredentialOf(t *testing.T) {
	a1 := credentialOf("Bearer " + jwt(`{"sub":"system:serviceaccount:ns:a","exp":1}`))
	a2 := credentialOf("Bearer " + jwt(`{"sub":"system:serviceaccount:ns:a","exp":2}`))
	b := credentialOf("Bearer " + jwt(`{"sub":"system:serviceaccount:ns:b"}`))
	if a1.sa == "" || a1.sa != a2.sa || a1.hash == a2.hash || a1.sa == b.sa {
		t.Fatalf("a1 %+v a2 %+v b %+v", a1, a2, b)
	}
	for _, auth := range []string{"Bearer abcdef.0123456789abcdef", "Basic dXNlcjpwdw==", "Bearer " + jwt(`{"sub":"alice"}`), "Bearer a.!!!.c"} {
		if c := credentialOf(auth); c.sa != "" || c.hash == "" {
			t.Errorf("%q: %+v, want no ServiceAccount", auth, c)
		}
	}
}

func TestIdentitiesLearnEvictSaveLoad(t *testing.T) {
	dir := t.TempDir()
	id := newIdentities(dir, slog.Default())
	if id.owner("t1") != "" {
		t.Fatal("unknown token has an owner")
	}
	for i := 0; i < maxIdentities+10; i++ {
		id.learn(fmt.Sprintf("t%d", i), "sa")
	}
	if id.owner("t0") != "" || id.owner(fmt.Sprintf("t%d", maxIdentities+9)) != "sa" || len(id.m) != maxIdentities {
		t.Fatalf("eviction: %d entries", len(id.m))
	}
	id.save()
	if st, err := os.Stat(filepath.Join(dir, identityFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("saved file: %v %v", st, err)
	}
	again := newIdentities(dir, slog.Default())
	if again.owner("t20") != "sa" || again.owner("t5") != "" || again.dirty {
		t.Fatal("not loaded as saved")
	}
}

// A node-identity client cannot name another owner's cache through its User-Agent: "@" only ever
// separates a component from a credential.
func TestCacheOwnerOfNodeClientCarriesNoCredential(t *testing.T) {
	s := &Server{}
	r, _ := http.NewRequest(http.MethodGet, "http://hub/api/v1/pods", nil)
	ri := &wire.RequestInfo{Component: "coredns@0123456789abcdef"}
	if own, _ := s.cacheOwner(ri, r, remote.Node); strings.Contains(own, "@") {
		t.Fatalf("node client's owner %q names a credential", own)
	}
	r.Header.Set("Authorization", "Bearer x")
	s.ids = newIdentities(t.TempDir(), slog.Default())
	if own, _ := s.cacheOwner(ri, r, remote.Passthrough); strings.Count(own, "@") != 1 {
		t.Fatalf("owner %q: want exactly one @", own)
	}
}

// The hash of a credential and the hash of a ServiceAccount never meet: an Authorization header
// that spells the ServiceAccount's hashed text does not read its cache.
func TestCredentialHashIsNotAServiceAccountHash(t *testing.T) {
	sa := credentialOf("Bearer " + jwt(`{"sub":"system:serviceaccount:ns:a"}`)).sa
	for _, auth := range []string{"sa:system:serviceaccount:ns:a", "Bearer sa:system:serviceaccount:ns:a", "sa:" + sa} {
		if c := credentialOf(auth); c.hash == sa || c.sa == sa {
			t.Errorf("%q hashes to the ServiceAccount's cache %s", auth, sa)
		}
	}
	s := &Server{ids: newIdentities("", slog.Default())}
	r, _ := http.NewRequest(http.MethodGet, "http://hub/api/v1/configmaps", nil)
	r.Header.Set("Authorization", "sa:system:serviceaccount:ns:a")
	if own, _ := s.cacheOwner(&wire.RequestInfo{Component: "app"}, r, remote.Passthrough); own == "app@"+sa {
		t.Fatalf("forged credential reads %s", own)
	}
}
