package local

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"nodehub/cache"
	"nodehub/hub/tokens"
	"nodehub/wire"
)

func newProxy(t *testing.T) *Proxy {
	t.Helper()
	st, err := cache.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ts, _ := tokens.Open("", tokens.Options{})
	return &Proxy{Store: st, NodeName: "edge-1", Tokens: ts}
}

func serve(t *testing.T, p *Proxy, method, path, body, caller string, shared bool) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, path, bytes.NewBufferString(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("User-Agent", "kubelet/v1.34.4")
	if !shared {
		r.Header.Set("Authorization", "Bearer "+caller)
	}
	ri, err := wire.ParseRequest(r)
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	p.ServeHTTP(w, r, &Request{Info: ri, Own: "kubelet", Shared: shared})
	return w
}

const tokenPath = "/api/v1/namespaces/ns/serviceaccounts/sa/token"

func tokenBody(pod string) string {
	exp := int64(3607)
	b, _ := json.Marshal(&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp,
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod, UID: types.UID("uid-" + pod)}}})
	return string(b)
}

func TestOfflineTokenKeptStandInOrRefused(t *testing.T) {
	p := newProxy(t)
	req, _ := tokens.Decode([]byte(tokenBody("p1")))
	p.Tokens.Put(tokens.KeyOf("node", "ns", "sa", req), tokens.Entry{Token: "cloud-token", Expiration: time.Now().Add(time.Hour), ValidUntil: time.Now().Add(time.Hour)})

	w := serve(t, p, http.MethodPost, tokenPath, tokenBody("p1"), "node", true)
	var tr authenticationv1.TokenRequest
	if w.Code != http.StatusCreated || json.Unmarshal(w.Body.Bytes(), &tr) != nil || tr.Status.Token != "cloud-token" || tr.Kind != "TokenRequest" {
		t.Fatalf("kept token: %d %s", w.Code, w.Body)
	}
	// Another pod of the node's clients: a stand-in, never the kept token.
	w = serve(t, p, http.MethodPost, tokenPath, tokenBody("p2"), "node", true)
	tr = authenticationv1.TokenRequest{}
	if w.Code != http.StatusCreated || json.Unmarshal(w.Body.Bytes(), &tr) != nil || tr.Status.Token == "" || tr.Status.Token == "cloud-token" {
		t.Fatalf("stand-in: %d %s", w.Code, w.Body)
	}
	// A client with its own credential asking the same: not the node's token, no stand-in.
	w = serve(t, p, http.MethodPost, tokenPath, tokenBody("p1"), "cred:abc", false)
	if w.Code != http.StatusServiceUnavailable || bytes.Contains(w.Body.Bytes(), []byte("cloud-token")) {
		t.Fatalf("other caller: %d %s", w.Code, w.Body)
	}
	if w := serve(t, p, http.MethodPost, tokenPath, `{"kind":"Pod"`, "node", true); w.Code != http.StatusBadRequest {
		t.Fatalf("malformed: %d", w.Code)
	}
}

func TestOfflineNodeRegistration(t *testing.T) {
	p := newProxy(t)
	node := &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{Name: "edge-1", UID: "u1", ResourceVersion: "5"}}
	body, _ := json.Marshal(node)
	// Never cached: refused.
	if w := serve(t, p, http.MethodPost, "/api/v1/nodes", string(body), "node", true); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("uncached node: %d %s", w.Code, w.Body)
	}
	k := cache.Key{Resource: cache.Resource{Owner: "kubelet", Version: "v1", Resource: "nodes"}, Name: "edge-1"}
	if err := p.Store.Put(k, &cache.Header{ContentType: wire.MediaJSON, APIVersion: "v1", Kind: "Node", Name: "edge-1", UID: "u1", ResourceVersion: "5"}, body); err != nil {
		t.Fatal(err)
	}
	w := serve(t, p, http.MethodPost, "/api/v1/nodes", string(body), "node", true)
	var st metav1.Status
	if w.Code != http.StatusConflict || json.Unmarshal(w.Body.Bytes(), &st) != nil || st.Reason != metav1.StatusReasonAlreadyExists || st.Details == nil || st.Details.Name != "edge-1" {
		t.Fatalf("cached node: %d %s", w.Code, w.Body)
	}
	other, _ := json.Marshal(&corev1.Node{TypeMeta: node.TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: "edge-2"}})
	if w := serve(t, p, http.MethodPost, "/api/v1/nodes", string(other), "node", true); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("another node: %d %s", w.Code, w.Body)
	}
	if w := serve(t, p, http.MethodPost, "/api/v1/namespaces/default/configmaps", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}`, "node", true); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("other create: %d %s", w.Code, w.Body)
	}
}
