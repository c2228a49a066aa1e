package identity

import (
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func jwt(claims string) string {
	e := base64.RawURLEncoding.EncodeToString
	return e([]byte(`{"alg":"RS256"}`)) + "." + e([]byte(claims)) + "." + e([]byte("sig"))
}

func TestOf(t *testing.T) {
	a1 := Of("Bearer " + jwt(`{"sub":"system:serviceaccount:ns:a","exp":1}`))
	a2 := Of("Bearer " + jwt(`{"sub":"system:serviceaccount:ns:a","exp":2}`))
	b := Of("Bearer " + jwt(`{"sub":"system:serviceaccount:ns:b"}`))
	if a1.SA == "" || a1.SA != a2.SA || a1.Hash == a2.Hash || a1.SA == b.SA {
		t.Fatalf("a1 %+v a2 %+v b %+v", a1, a2, b)
	}
	for _, auth := range []string{"Bearer abcdef.0123456789abcdef", "Basic dXNlcjpwdw==", "Bearer " + jwt(`{"sub":"alice"}`), "Bearer a.!!!.c"} {
		if c := Of(auth); c.SA != "" || c.Hash == "" {
			t.Errorf("%q: %+v, want no ServiceAccount", auth, c)
		}
	}
}

func TestTableLearnEvictSaveLoad(t *testing.T) {
	dir := t.TempDir()
	id := Open(dir, slog.Default())
	if id.owner("t1") != "" {
		t.Fatal("unknown token has an owner")
	}
	for i := 0; i < maxEntries+10; i++ {
		id.learn(fmt.Sprintf("t%d", i), "sa")
	}
	if id.owner("t0") != "" || id.owner(fmt.Sprintf("t%d", maxEntries+9)) != "sa" || len(id.m) != maxEntries {
		t.Fatalf("eviction: %d entries", len(id.m))
	}
	id.Save()
	if st, err := os.Stat(filepath.Join(dir, fileName)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("saved file: %v %v", st, err)
	}
	again := Open(dir, slog.Default())
	if again.owner("t20") != "sa" || again.owner("t5") != "" || again.dirty {
		t.Fatal("not loaded as saved")
	}
}

// A token's own cache until the cloud accepts it; its ServiceAccount's from then on, also for
// the same ServiceAccount's next token once that one is accepted or issued.
func TestOwnerFollowsWhatTheCloudAccepted(t *testing.T) {
	id := Open("", nil)
	tok := "Bearer " + jwt(`{"sub":"system:serviceaccount:ns:a","exp":1}`)
	own, c := id.Owner("app", tok)
	if own != "app@"+c.Hash || c.SA == "" {
		t.Fatalf("before the cloud accepted it: %q %+v", own, c)
	}
	if got := id.Accepted("app", c); got != "app@"+c.SA {
		t.Fatalf("Accepted: %q", got)
	}
	if own, _ := id.Owner("app", tok); own != "app@"+c.SA {
		t.Fatalf("after the cloud accepted it: %q", own)
	}
	if own, _ := id.Owner("app", ""); own != "app@anonymous" {
		t.Fatalf("no credential: %q", own)
	}
	if got := id.Accepted("app", Of("Basic dXNlcjpwdw==")); got != "" {
		t.Fatalf("a credential that is no ServiceAccount's token: %q", got)
	}
	next := jwt(`{"sub":"system:serviceaccount:ns:a","exp":2}`)
	id.Vouch(next)
	if own, _ := id.Owner("app", "Bearer "+next); own != "app@"+c.SA {
		t.Fatalf("a token the cloud issued: %q", own)
	}
}

// The hash of a credential and the hash of a ServiceAccount never meet: an Authorization header
// that spells the ServiceAccount's hashed text does not read its cache.
func TestCredentialHashIsNotAServiceAccountHash(t *testing.T) {
	sa := Of("Bearer " + jwt(`{"sub":"system:serviceaccount:ns:a"}`)).SA
	for _, auth := range []string{"sa:system:serviceaccount:ns:a", "Bearer sa:system:serviceaccount:ns:a", "sa:" + sa} {
		if c := Of(auth); c.Hash == sa || c.SA == sa {
			t.Errorf("%q hashes to the ServiceAccount's cache %s", auth, sa)
		}
		if own, _ := Open("", nil).Owner("app", auth); strings.HasSuffix(own, "@"+sa) {
			t.Errorf("forged credential %q reads %s", auth, own)
		}
	}
}
