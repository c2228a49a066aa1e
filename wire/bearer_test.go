package wire

import (
	"strings"
	"testing"
)

// apiserverBearer is the kube-apiserver's reading of an Authorization header, written from
// k8s.io/apiserver/pkg/authentication/request/bearertoken (AuthenticateRequest) as a separate
// reference for the fuzz target: the token it hands to the token authenticators, or false when it
// takes the header as no bearer token at all (and serves the request as anonymous).
func apiserverBearer(header string) (string, bool) {
	auth := strings.TrimSpace(header)
	if auth == "" {
		return "", false
	}
	parts := strings.SplitN(auth, " ", 3)
	if len(parts) < 2 || strings.ToLower(parts[0]) != "bearer" {
		return "", false
	}
	if len(parts[1]) == 0 {
		return "", false
	}
	return parts[1], true
}

func TestBearerTokenAsTheAPIServerReadsIt(t *testing.T) {
	for _, tc := range []struct {
		header, token string
		ok            bool
	}{
		{"Bearer tok", "tok", true},
		{"bearer tok", "tok", true},
		{"BEARER tok", "tok", true},
		{"  Bearer tok  ", "tok", true},
		{"Bearer tok extra", "tok", true},
		{"Bearer tok\t", "tok", true},
		{"Bearer a\tb", "a\tb", true},
		{"Bearer  tok", "", false}, // two spaces: the apiserver's anonymous
		{"Bearer\ttok", "", false},
		{"Bearer \ttok", "\ttok", true},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"Bearer   ", "", false},
		{"Basic dXNlcjpwdw==", "", false},
		{"Bearertok", "", false},
		{"", "", false},
	} {
		tok, ok := BearerToken(tc.header)
		if tok != tc.token || ok != tc.ok {
			t.Errorf("%q: %q %v, want %q %v", tc.header, tok, ok, tc.token, tc.ok)
		}
		if rt, rok := apiserverBearer(tc.header); rt != tc.token || rok != tc.ok {
			t.Errorf("reference %q: %q %v, want %q %v", tc.header, rt, rok, tc.token, tc.ok)
		}
	}
}

// FuzzBearerToken: the hub reads every Authorization header as the apiserver does (its rules,
// apiserverBearer); test/e2e/authparse compares it with the apiserver's own package.
func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"Bearer tok", "Bearer  tok", "bearer\ttok", " Bearer tok x", "Bearer \u00a0tok", "\u0085Bearer tok\u00a0", "BEARER", "Bearer \xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		tok, ok := BearerToken(header)
		want, wantOK := apiserverBearer(header)
		if tok != want || ok != wantOK {
			t.Fatalf("%q: the hub reads %q %v, the apiserver %q %v", header, tok, ok, want, wantOK)
		}
	})
}
