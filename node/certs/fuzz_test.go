package certs

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// FuzzClusterInfo feeds cluster-info's untrusted parts (a detached JWS and a kubeconfig) to
// their parsers: they must fail cleanly, never panic, and never accept a signature made
// without the secret.
func FuzzClusterInfo(f *testing.F) {
	f.Add(sign("kubeconfig", "abcdef", "0123456789abcdef"), "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: eA==\n")
	f.Add("..", "{}")
	// A real cluster-info (testdata/cluster-info.json, captured from the e2e apiserver).
	if b, err := os.ReadFile("testdata/cluster-info.json"); err == nil {
		var info clusterInfo
		if json.Unmarshal(b, &info) == nil {
			for k, v := range info.Data {
				if strings.HasPrefix(k, "jws-kubeconfig-") {
					f.Add(v, info.Data["kubeconfig"])
				}
			}
			f.Add("..", info.Data["kubeconfig"])
		}
	}
	f.Fuzz(func(t *testing.T, jws, kubeconfig string) {
		if verifyDetachedJWS(jws, []byte(kubeconfig), "abcdef", "0123456789abcdef") == nil && jws != sign(kubeconfig, "abcdef", "0123456789abcdef") {
			// Another header encoding of the same claims is fine; a different MAC is not.
			if verifyDetachedJWS(jws, []byte(kubeconfig), "abcdef", "fedcba9876543210") == nil {
				t.Fatalf("%q verifies with two secrets", jws)
			}
		}
		_, _ = caFromKubeconfig([]byte(kubeconfig))
	})
}

// FuzzKubeconfig parses a kubeconfig (--bootstrap-file, kubelet's kubeconfig; YAML or JSON) as
// LoadKubeconfig does: it fails cleanly, never panics.
func FuzzKubeconfig(f *testing.F) {
	f.Add([]byte("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://10.0.0.1:6443\n    certificate-authority-data: eA==\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\nusers:\n- name: u\n  user:\n    token: abcdef.0123456789abcdef\n"))
	f.Add([]byte(`{"clusters":[{"name":"c","cluster":{"server":"s"}}],"users":[{"name":"u","user":{"client-certificate-data":"eA=="}}]}`))
	ca := func(string) ([]byte, error) { return []byte("-----BEGIN CERTIFICATE-----\n"), nil }
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = parseKubeconfig(data, "/etc/kubernetes/kubelet.conf", ca)
	})
}
