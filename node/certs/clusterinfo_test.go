package certs

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// clusterInfoServer serves kube-public/cluster-info whose kubeconfig's CA bundle is the server's
// own certificate followed by extra, signed for the token abcdef.0123456789abcdef.
func clusterInfoServer(t *testing.T, extra []byte) *httptest.Server {
	t.Helper()
	var kubeconfig string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/namespaces/kube-public/configmaps/cluster-info" {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"data": map[string]string{
			"kubeconfig": kubeconfig, "jws-kubeconfig-abcdef": sign(kubeconfig, "abcdef", "0123456789abcdef")}})
	}))
	t.Cleanup(srv.Close)
	bundle := append(pemCert(srv.Certificate().Raw), extra...)
	kubeconfig = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: " + srv.URL +
		"\n    certificate-authority-data: " + base64.StdEncoding.EncodeToString(bundle) + "\n"
	return srv
}

// A pin that matches one certificate of cluster-info's bundle trusts that certificate only.
func TestFetchCAKeepsOnlyPinnedCertificates(t *testing.T) {
	intruder, _ := selfSigned(t, "intruder-ca", true)
	srv := clusterInfoServer(t, intruder)
	pin := strings.TrimPrefix(CAHash(srv.Certificate()), "sha256:")
	d := Discovery{Token: "abcdef.0123456789abcdef", CAHashes: []string{pin}}
	ca, err := d.FetchCA(context.Background(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(ca), "BEGIN CERTIFICATE"); n != 1 {
		t.Fatalf("the CA kept %d certificates, want the pinned one", n)
	}
	if b, _ := pem.Decode(ca); b == nil || string(b.Bytes) != string(srv.Certificate().Raw) {
		t.Fatal("the CA kept is not the pinned certificate")
	}
	// Without verification the whole bundle is taken (the operator said so).
	d = Discovery{Token: "abcdef.0123456789abcdef", SkipCAVerification: true}
	if ca, err := d.FetchCA(context.Background(), srv.URL); err != nil || strings.Count(string(ca), "BEGIN CERTIFICATE") != 2 {
		t.Fatalf("unverified: %v, %d certificates", err, strings.Count(string(ca), "BEGIN CERTIFICATE"))
	}
}
