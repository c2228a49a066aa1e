package certs

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nodehub/durable"
	"nodehub/internal/certtest"
)

// sign makes a detached JWS the way the bootstrap signer does.
func sign(payload, id, secret string) string {
	hdr := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","kid":"` + id + `"}`))
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(hdr + "." + base64.RawURLEncoding.EncodeToString([]byte(payload))))
	return hdr + ".." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

func TestVerifyDetachedJWS(t *testing.T) {
	const payload = "apiVersion: v1\nkind: Config\n"
	good := sign(payload, "abcdef", "0123456789abcdef")
	if err := verifyDetachedJWS(good, []byte(payload), "abcdef", "0123456789abcdef"); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ jws, payload, id, secret string }{
		"wrong secret":     {good, payload, "abcdef", "0123456789abcdeX"},
		"wrong kid":        {good, payload, "zzzzzz", "0123456789abcdef"},
		"changed payload":  {good, payload + " ", "abcdef", "0123456789abcdef"},
		"attached payload": {strings.Replace(good, "..", ".eA.", 1), payload, "abcdef", "0123456789abcdef"},
		"garbage":          {"x", payload, "abcdef", "0123456789abcdef"},
	} {
		if err := verifyDetachedJWS(tc.jws, []byte(tc.payload), tc.id, tc.secret); !errors.Is(err, ErrJWS) {
			t.Errorf("%s: err %v, want ErrJWS", name, err)
		}
	}
}

func TestParseTokenAndHash(t *testing.T) {
	if id, sec, err := ParseToken("abcdef.0123456789abcdef"); err != nil || id != "abcdef" || sec != "0123456789abcdef" {
		t.Fatalf("%q %q %v", id, sec, err)
	}
	for _, bad := range []string{"", "abcdef", "ABCDEF.0123456789abcdef", "abcdef.0123",
		"abcdef.0123456789ABCDEF", "abcdef.0123456789abcdef\n", "abcdef.0123456789abcde.", "abcde.f0123456789abcdef", "abcdef..123456789abcdef", "abcdefg.0123456789abcdef", "abcdef.0123456789abcdefa"} {
		if _, _, err := ParseToken(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	h := "sha256:" + strings.Repeat("Ab", 32)
	if v, err := ParseCAHash(h); err != nil || v != strings.Repeat("ab", 32) {
		t.Fatalf("%q %v", v, err)
	}
	for _, bad := range []string{"ab", "sha1:" + strings.Repeat("ab", 20), "sha256:xyz"} {
		if _, err := ParseCAHash(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestRenewAtCountsFromWhenTheCertificateWasObtained(t *testing.T) {
	got := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	nb := got.Add(-5 * time.Minute) // backdated by the signer
	na := got.Add(100 * time.Second)
	for _, j := range []float64{0, 0.5, 1} {
		at := renewAt(got, nb, na, j)
		if at.Before(got.Add(70*time.Second)) || at.After(got.Add(90*time.Second)) {
			t.Errorf("jitter %v: renew at +%v, want within 70–90s", j, at.Sub(got))
		}
	}
	// A certificate loaded before its NotBefore (clock skew) counts from NotBefore.
	if at := renewAt(nb.Add(-time.Hour), nb, nb.Add(100*time.Second), 0); !at.Equal(nb.Add(70 * time.Second)) {
		t.Errorf("renew at %v", at)
	}
}

func TestWriteFileAtomicAndLoadPair(t *testing.T) {
	der, key := certtest.SelfSigned(t, &x509.Certificate{Subject: pkix.Name{CommonName: "system:node:n"}})
	kp, _ := keyPEM(key)
	data := append(pemCert(der), kp...)
	path := filepath.Join(t.TempDir(), "pki", ClientPEMName)
	if err := durable.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v err %v", st.Mode(), err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
	c, err := loadPair(path, time.Now())
	if err != nil || c.Leaf.Subject.CommonName != "system:node:n" {
		t.Fatalf("%v %v", c, err)
	}
	if _, err := loadPair(path, time.Now().Add(2*time.Hour)); !errors.Is(err, errExpired) {
		t.Fatalf("expired certificate: err %v", err)
	}
}

func TestCovers(t *testing.T) {
	c := &x509.Certificate{DNSNames: KubernetesServiceNames, IPAddresses: nil}
	if !covers(c, nil, KubernetesServiceNames[:2]) || covers(c, nil, []string{"other"}) {
		t.Fatal("covers")
	}
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
