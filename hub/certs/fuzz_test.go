package certs

import "testing"

// FuzzClusterInfo feeds cluster-info's untrusted parts (a detached JWS and a kubeconfig) to
// their parsers: they must fail cleanly, never panic, and never accept a signature made
// without the secret.
func FuzzClusterInfo(f *testing.F) {
	f.Add(sign("kubeconfig", "abcdef", "0123456789abcdef"), "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: eA==\n")
	f.Add("..", "{}")
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
