package identity

import (
	"strings"
	"testing"

	"nodehub/wire"
)

// FuzzOf: any Authorization header is hashed without panicking; it is a bearer token exactly when
// the apiserver reads one in it, and no header hashes into the ServiceAccounts' texts.
func FuzzOf(f *testing.F) {
	f.Add("Bearer " + jwt(`{"sub":"system:serviceaccount:ns:a"}`))
	f.Add("Bearer a.b.c")
	f.Add("Bearer  a.b.c")
	f.Add("Basic dXNlcjpwdw==")
	f.Add("sa:system:serviceaccount:ns:a")
	f.Fuzz(func(t *testing.T, auth string) {
		c := Of(auth)
		if c.Hash == "" {
			t.Fatal("no hash")
		}
		if strings.HasPrefix(auth, "sa:") && c.Hash == shortHash(auth) { // the hash of ServiceAccount auth[3:]
			t.Fatalf("%q hashes into the ServiceAccounts' namespace", auth)
		}
		if _, ok := wire.BearerToken(auth); ok != c.Bearer {
			t.Fatalf("%q: bearer %v, the apiserver's reading %v", auth, c.Bearer, ok)
		}
	})
}
