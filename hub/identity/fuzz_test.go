package identity

import (
	"strings"
	"testing"
)

// FuzzOf: any Authorization header is hashed without panicking, and only a JWT whose sub names a
// ServiceAccount gets a ServiceAccount hash, and no header hashes to one.
func FuzzOf(f *testing.F) {
	f.Add("Bearer " + jwt(`{"sub":"system:serviceaccount:ns:a"}`))
	f.Add("Bearer a.b.c")
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
		if c.SA != "" && !strings.HasPrefix(auth, "Bearer ") {
			t.Fatalf("%q: ServiceAccount from a non-bearer credential", auth)
		}
	})
}
