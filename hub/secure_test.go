package hub

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"nodehub/node/certs"
)

// Where the node's identity is never lent, a request without a bearer token gets a 401 Status
// and never reaches the cloud: the secure port, and the plain port from another host.
func TestNoTokenWhereTheNodeIsNotLentIs401(t *testing.T) {
	s, err := New(Config{NodeName: "n", Servers: []string{"https://127.0.0.1:1"}, Credentials: certs.NewSource(certs.Files{})})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		h      http.HandlerFunc
		remote string
		auth   string
	}{
		{"secure, no credentials", s.pipe.ServeBearer, "127.0.0.1:5000", ""},
		{"secure, basic auth", s.pipe.ServeBearer, "10.0.0.7:5000", "Basic dXNlcjpwdw=="},
		{"secure, empty bearer", s.pipe.ServeBearer, "10.0.0.7:5000", "Bearer "},
		{"secure, blank bearer", s.pipe.ServeBearer, "10.0.0.7:5000", "Bearer   "},
		// What the apiserver would serve as anonymous is no bearer token here either.
		{"secure, two spaces", s.pipe.ServeBearer, "10.0.0.7:5000", "Bearer  a.b.c"},
		{"secure, a tab", s.pipe.ServeBearer, "10.0.0.7:5000", "Bearer\ta.b.c"},
		{"pod's address, two spaces", s.pipe.ServeHTTP, "10.0.0.7:5000", "Bearer  a.b.c"},
		// No loopback local address in the request's context: it came in on another address.
		{"plain port from another host", s.pipe.ServeHTTP, "10.0.0.7:5000", ""},
	} {
		r := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/default/configmaps", nil)
		r.RemoteAddr = tc.remote
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		w := httptest.NewRecorder()
		tc.h(w, r)
		var st struct {
			Kind string `json:"kind"`
			Code int    `json:"code"`
		}
		if w.Code != http.StatusUnauthorized || json.Unmarshal(w.Body.Bytes(), &st) != nil || st.Kind != "Status" || st.Code != 401 {
			t.Errorf("%s: %d %s, want a 401 Status", tc.name, w.Code, w.Body)
		}
	}
}
