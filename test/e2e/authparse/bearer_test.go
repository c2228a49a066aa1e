// Package authparse holds no code: its test compares the hub's reading of an Authorization header
// (wire.BearerToken) with the kube-apiserver's own authenticator (k8s.io/apiserver's
// bearertoken), on the same inputs.
package authparse

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/user"

	"nodehub/wire"
)

// recorder is a token authenticator that records the token the apiserver's header parser hands
// it, and accepts it.
type recorder struct {
	token  string
	called bool
}

func (r *recorder) AuthenticateToken(_ context.Context, token string) (*authenticator.Response, bool, error) {
	r.token, r.called = token, true
	return &authenticator.Response{User: &user.DefaultInfo{Name: "x"}}, true, nil
}

// apiserverReads returns the token the apiserver's bearertoken authenticator takes from header,
// or false when it takes none (the request goes on to the next authenticator: anonymous).
func apiserverReads(t testing.TB, header string) (string, bool) {
	rec := &recorder{}
	req, err := http.NewRequest(http.MethodGet, "https://apiserver/version", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header["Authorization"] = []string{header}
	if _, _, err := bearertoken.New(rec).AuthenticateRequest(req); err != nil && rec.called {
		t.Fatalf("%q: %v", header, err)
	}
	return rec.token, rec.called
}

func same(t testing.TB, header string) {
	tok, ok := wire.BearerToken(header)
	want, wantOK := apiserverReads(t, header)
	if tok != want || ok != wantOK {
		t.Fatalf("%q: the hub reads %q %v, the apiserver %q %v", header, tok, ok, want, wantOK)
	}
}

var seeds = []string{
	"Bearer tok", "bearer tok", "BEARER tok", "Bearer  tok", "Bearer\ttok", "Bearer \ttok", "Bearer tok extra",
	" Bearer tok ", "Bearer", "Bearer ", "Bearer   ", "Basic dXNlcjpwdw==", "", "\u00a0Bearer tok\u0085",
	"Bearer \u00a0", "Bearer tok\u2028", "Bearer \xff", "Bearertok", "Bearer\u00a0tok",
}

// Every header of up to five symbols from the ones that matter (the scheme's pieces, the space,
// the white space TrimSpace knows, a token's character), and the seeds: the hub and the
// apiserver take the same token, or both none.
func TestHubReadsAuthorizationAsTheAPIServer(t *testing.T) {
	for _, s := range seeds {
		same(t, s)
	}
	symbols := []string{"Bearer", "bearer", "BeArEr", " ", "\t", "\n", "\u00a0", "\u0085", "t", "."}
	var walk func(prefix string, n int)
	walk = func(prefix string, n int) {
		same(t, prefix)
		if n == 0 {
			return
		}
		for _, s := range symbols {
			walk(prefix+s, n-1)
		}
	}
	walk("", 5)
	same(t, strings.Repeat("Bearer ", 3))
}

// FuzzHubReadsAuthorizationAsTheAPIServer: the same on any header (go test -fuzz in this
// directory).
func FuzzHubReadsAuthorizationAsTheAPIServer(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) { same(t, header) })
}
