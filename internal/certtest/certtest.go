// Package certtest mints the keys and certificates tests need: self-signed ones, a CA and what it
// signs. Only tests import it (the design tests' arrows table gives no package an arrow to it).
package certtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"
)

// Key returns a new P-256 key.
func Key(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// SelfSigned signs tmpl with a new key and returns the certificate's DER and the key. A zero
// serial number, NotBefore or NotAfter is filled (a random serial; an hour ago; in an hour).
func SelfSigned(t testing.TB, tmpl *x509.Certificate) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key := Key(t)
	tmpl = filled(t, tmpl)
	return create(t, tmpl, tmpl, key.Public(), key), key
}

// SelfSignedTLS is SelfSigned's certificate as TLS presents it.
func SelfSignedTLS(t testing.TB, tmpl *x509.Certificate) *tls.Certificate {
	t.Helper()
	return TLS(SelfSigned(t, tmpl))
}

// NodeClient is the template of a node's client certificate: system:node:<node> in
// system:nodes, for client authentication.
func NodeClient(node string) *x509.Certificate {
	return &x509.Certificate{Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
}

// CA is a certificate authority of a test.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// NewCA returns a new CA named cn, valid from an hour ago for an hour.
func NewCA(t testing.TB, cn string) *CA {
	t.Helper()
	der, key := SelfSigned(t, &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign})
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, Key: key}
}

// Pool is a certificate pool of the CA alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Sign signs tmpl (its zero fields filled as SelfSigned's) for pub and returns the DER.
func (ca *CA) Sign(t testing.TB, tmpl *x509.Certificate, pub crypto.PublicKey) []byte {
	t.Helper()
	return create(t, filled(t, tmpl), ca.Cert, pub, ca.Key)
}

// Issue signs tmpl for a new key: the certificate as TLS presents it.
func (ca *CA) Issue(t testing.TB, tmpl *x509.Certificate) *tls.Certificate {
	t.Helper()
	key := Key(t)
	return TLS(ca.Sign(t, tmpl, key.Public()), key)
}

// TLS is a certificate's DER and its key as TLS presents them.
func TLS(der []byte, key *ecdsa.PrivateKey) *tls.Certificate {
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// CertPEM is a certificate's DER as PEM.
func CertPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// KeyPEM is a key as PEM (SEC 1, "EC PRIVATE KEY").
func KeyPEM(t testing.TB, key *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

// filled is a copy of tmpl with a zero serial number, NotBefore or NotAfter filled.
func filled(t testing.TB, tmpl *x509.Certificate) *x509.Certificate {
	c := *tmpl
	if c.SerialNumber == nil {
		n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
		if err != nil {
			t.Fatal(err)
		}
		c.SerialNumber = n.Add(n, big.NewInt(2))
	}
	if c.NotBefore.IsZero() {
		c.NotBefore = time.Now().Add(-time.Hour)
	}
	if c.NotAfter.IsZero() {
		c.NotAfter = time.Now().Add(time.Hour)
	}
	return &c
}

func create(t testing.TB, tmpl, parent *x509.Certificate, pub crypto.PublicKey, key *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}
