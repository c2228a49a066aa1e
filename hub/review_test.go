package hub

import (
	"encoding/base64"
	"io"
	"net/http"
	"strings"
	"testing"

	"nodehub/hub/serve"
	"nodehub/wire"
)

// unsignedJWT is a token that claims sub, as anyone can write one.
func unsignedJWT(sub string) string {
	e := base64.RawURLEncoding.EncodeToString
	return e([]byte(`{"alg":"RS256"}`)) + "." + e([]byte(`{"sub":"`+sub+`"}`)) + "." + e([]byte("sig"))
}

const (
	secretPath = "/api/v1/namespaces/ns/configmaps/secret"
	publicPath = "/api/v1/namespaces/ns/configmaps/public"
	eventsPath = "/api/v1/namespaces/ns/events"
	secretCM   = `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"secret","namespace":"ns","resourceVersion":"3"},"data":{"password":"hunter2"}}`
	publicCM   = `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"public","namespace":"ns","resourceVersion":"4"}}`
)

// rbacCloud makes the fake cloud authorize as the apiserver would: the ConfigMap secret only for
// the bearer token owner (as the apiserver reads the header), /version and the ConfigMap public
// for anyone, anonymous included.
func rbacCloud(f *proxyFixture, owner string) {
	f.cloud.vouch(owner, "system:serviceaccount:ns:a")
	f.cloud.handle = func(w http.ResponseWriter, r *http.Request) bool {
		tok, _ := wire.BearerToken(r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/version":
			_, _ = io.WriteString(w, `{"major":"1","minor":"34"}`)
		case r.URL.Path == publicPath:
			_, _ = io.WriteString(w, publicCM)
		case r.URL.Path == secretPath && tok == owner:
			_, _ = io.WriteString(w, secretCM)
		case r.URL.Path == secretPath:
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403}`)
		default:
			return false
		}
		return true
	}
}

// Issue 28, item 2: a header the apiserver serves as anonymous ("Bearer  <token>", two spaces; a
// tab), or a forged token that got a 2xx on a non-resource path, never learns the ServiceAccount
// its token claims: offline it reads nothing of that ServiceAccount's cache and creates nothing.
// The ServiceAccount's own token, however the apiserver lets it be spelt (lowercase "bearer",
// "Bearer tok extra"), reads its cache offline.
func TestForgedHeadersNeverLearnAServiceAccount(t *testing.T) {
	f := newProxyFixture(t, nil)
	real := unsignedJWT("system:serviceaccount:ns:a") + "-real"
	rbacCloud(f, real)
	if a := f.do(t, http.MethodGet, secretPath, "app/1.0", "Bearer "+real, ""); a.code != http.StatusOK {
		t.Fatalf("the owner's online read: %d %s", a.code, a.body)
	}
	forged := unsignedJWT("system:serviceaccount:ns:a")
	attacks := []string{"Bearer  " + forged, "Bearer\t" + forged, "Bearer  " + real, "Bearer " + forged}
	for _, auth := range attacks {
		for _, path := range []string{"/version", publicPath} {
			if a := f.do(t, http.MethodGet, path, "app/1.0", auth, ""); a.code != http.StatusOK {
				t.Fatalf("%q online GET %s: %d %s", auth, path, a.code, a.body)
			}
		}
	}
	for _, r := range f.cloud.reviewed() {
		if _, ok := wire.BearerToken(r.auth); !ok || r.ua != "nodehub/identity" || r.cert {
			t.Errorf("a review sent as %+v: want a bearer token's, with no certificate", r)
		}
	}
	f.offline(t)
	for _, auth := range attacks {
		if a := f.do(t, http.MethodGet, secretPath, "app/1.0", auth, ""); a.code == http.StatusOK || strings.Contains(a.body, "hunter2") {
			t.Errorf("offline, %q read the ServiceAccount's cached ConfigMap: %d %s", auth, a.code, a.body)
		}
		if a := f.do(t, http.MethodPost, eventsPath, "app/1.0", auth, `{"kind":"Event","apiVersion":"v1","metadata":{"name":"e","namespace":"ns"}}`); a.code != http.StatusServiceUnavailable {
			t.Errorf("offline, %q created an event: %d %s", auth, a.code, a.body)
		}
	}
	for _, auth := range []string{"Bearer " + real, "bearer " + real, "Bearer " + real + " extra", " BEARER " + real + "\t"} {
		if a := f.do(t, http.MethodGet, secretPath, "app/1.0", auth, ""); a.code != http.StatusOK || !strings.Contains(a.body, "hunter2") {
			t.Errorf("offline, the owner's token as %q: %d %s", auth, a.code, a.body)
		}
	}
}

// One review per new token, sent with exactly the request's Authorization header to the server
// that answered, and none for a token the hub knows, for a non-resource path, or for a header the
// apiserver reads no bearer token in.
func TestOneReviewPerNewToken(t *testing.T) {
	f := newProxyFixture(t, nil)
	rbacCloud(f, "tok")
	for i := 0; i < 3; i++ {
		f.do(t, http.MethodGet, publicPath, "app/1.0", "Bearer tok", "")
		f.do(t, http.MethodGet, publicPath, "app/1.0", "bearer tok extra", "")
		f.do(t, http.MethodGet, publicPath, "app/1.0", "Bearer refused", "")
		f.do(t, http.MethodGet, publicPath, "app/1.0", "Bearer  tok", "")
		f.do(t, http.MethodGet, "/version", "app/1.0", "Bearer other", "")
	}
	got := f.cloud.reviewed()
	if len(got) != 2 || got[0].auth != "Bearer tok" || got[1].auth != "Bearer refused" || got[0].method != http.MethodPost || got[0].uri != serve.ReviewPath {
		t.Fatalf("reviews: %+v; want one for tok, one for the refused token", got)
	}
}
