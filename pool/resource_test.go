package pool

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"
)

func TestParseResources(t *testing.T) {
	got, err := ParseResources(DefaultResources + ", /v1/services")
	if err != nil || len(got) != 2 || got[0].Path() != "/api/v1/services" || got[1].Path() != "/apis/discovery.k8s.io/v1/endpointslices" {
		t.Fatalf("%+v %v", got, err)
	}
	for _, bad := range []string{"services", "v1/services", "/v1/", "a/b/c/d"} {
		if _, err := ParseResources(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	r := Resource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases", Namespace: "kube-node-lease", LabelSelector: "nodehub.io/pool=a"}
	if u := r.url("watch=1"); u != "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases?watch=1&labelSelector=nodehub.io%2Fpool%3Da" {
		t.Fatalf("url %s", u)
	}
}

func TestNodeOnlyAcceptsNodeIdentities(t *testing.T) {
	cs := func(cn string, orgs ...string) tls.ConnectionState {
		return tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Subject: pkix.Name{CommonName: cn, Organization: orgs}}}}
	}
	if err := nodeOnly(cs("system:node:edge-2", "system:nodes")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []tls.ConnectionState{cs("admin", "system:masters"), cs("system:node:edge-2"), cs("edge-2", "system:nodes"), {}} {
		if err := nodeOnly(c); err == nil {
			t.Errorf("%+v accepted", c.PeerCertificates)
		}
	}
}
