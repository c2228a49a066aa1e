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
	if !a1.Bearer || a1.Hash == a2.Hash {
		t.Fatalf("a1 %+v a2 %+v", a1, a2)
	}
	// The apiserver's one token, however the header spells it: one hash.
	for _, auth := range []string{"bearer tok", "  Bearer tok ", "BEARER tok extra"} {
		if c := Of(auth); c != Of("Bearer tok") {
			t.Errorf("%q: %+v, want the token tok's %+v", auth, c, Of("Bearer tok"))
		}
	}
	// What the apiserver reads as no bearer token: a credential of its own, never a token's.
	for _, auth := range []string{"Bearer  tok", "Bearer\ttok", "Basic dXNlcjpwdw==", "Bearer", "tok"} {
		if c := Of(auth); c.Bearer || c.Hash == "" || c.Hash == Of("Bearer tok").Hash {
			t.Errorf("%q: %+v, want no bearer token", auth, c)
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

// The hash of a credential and the hash of a ServiceAccount never meet: an Authorization header
// that spells the ServiceAccount's hashed text does not read its cache.
func TestCredentialHashIsNotAServiceAccountHash(t *testing.T) {
	sa := serviceAccountHash("system:serviceaccount:ns:a")
	for _, auth := range []string{"sa:system:serviceaccount:ns:a", "Bearer sa:system:serviceaccount:ns:a", "sa:" + sa, "token:tok"} {
		if c := Of(auth); c.Hash == sa || c.Hash == tokenHash("tok") {
			t.Errorf("%q hashes to the ServiceAccount's cache %s", auth, sa)
		}
		if own, _ := Open("", nil).Owner("app", auth); strings.HasSuffix(own, "@"+sa) {
			t.Errorf("forged credential %q reads %s", auth, own)
		}
	}
}

// The table of the rule before (learnt from a token's claims and any 2xx) is not trusted: Open
// deletes it and knows none of its tokens.
func TestOldTableIsDropped(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, oldFileName)
	if err := os.WriteFile(old, []byte(`[["`+tokenHash("t")+`","`+serviceAccountHash("system:serviceaccount:ns:a")+`"]]`), 0o600); err != nil {
		t.Fatal(err)
	}
	id := Open(dir, nil)
	if id.Vouched(Of("Bearer t")) {
		t.Fatal("a token of the old table is vouched for")
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Fatalf("the old table is still there: %v", err)
	}
}

// The apiserver's JWT parser decodes a token's parts loosely: "QQ" and "QR" are both the byte 'A'
// (trailing bits), so one signed token has many spellings that all verify. They are one token
// to the hub: asked about once, one entry in the table.
func TestSpellingsOfOneTokenAreOneCredential(t *testing.T) {
	a := Of("Bearer eyJhbGciOiJSUzI1NiJ9.QQ.c2lnbmF0dXJl")
	for _, other := range []string{"Bearer eyJhbGciOiJSUzI1NiJ9.QR.c2lnbmF0dXJl", "Bearer eyJhbGciOiJSUzI1NiJ9.QZ.c2lnbmF0dXJl", "Bearer eyJhbGciOiJSUzI1NiJ9.QQ==.c2lnbmF0dXJl"} {
		if got := Of(other); got != a {
			t.Errorf("%s: %+v, want %+v (the same token)", other, got, a)
		}
	}
	if Of("Bearer eyJhbGciOiJSUzI1NiJ9.Qg.c2lnbmF0dXJl") == a {
		t.Error("another token ('B') hashed as 'A'")
	}
	if Of("Bearer not-a-jwt") == Of("Bearer not-a-jwt2") {
		t.Error("two opaque tokens hashed alike")
	}
}
