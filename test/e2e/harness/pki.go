package harness

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// PKI is the test cluster's certificate authority and the files made from it.
type PKI struct {
	Dir    string
	CA     *x509.Certificate
	CAKey  crypto.Signer
	CAFile string
}

// NewPKI makes a CA in dir.
func NewPKI(dir string) (*PKI, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "nodehub-e2e-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	ca, _ := x509.ParseCertificate(der)
	p := &PKI{Dir: dir, CA: ca, CAKey: key, CAFile: filepath.Join(dir, "ca.crt")}
	if err := writePEM(p.CAFile, "CERTIFICATE", der); err != nil {
		return nil, err
	}
	if err := writeKey(filepath.Join(dir, "ca.key"), key); err != nil {
		return nil, err
	}
	return p, nil
}

var serial int64 = 100

// Issue signs a certificate for cn/orgs (a client certificate, or a serving one when ips or dns
// are given) and writes name.crt and name.key. It returns the two paths.
func (p *PKI) Issue(name, cn string, orgs []string, ips []net.IP, dns []string) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		IPAddresses:  ips,
		DNSNames:     dns,
	}
	if len(ips) > 0 || len(dns) > 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.CA, key.Public(), p.CAKey)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(p.Dir, name+".crt"), filepath.Join(p.Dir, name+".key")
	if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
		return "", "", err
	}
	return certFile, keyFile, writeKey(keyFile, key)
}

// ServiceAccountKey writes an ECDSA key pair for signing ServiceAccount tokens.
func (p *PKI) ServiceAccountKey() (pub, priv string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return "", "", err
	}
	pub, priv = filepath.Join(p.Dir, "sa.pub"), filepath.Join(p.Dir, "sa.key")
	if err := writePEM(pub, "PUBLIC KEY", pubDER); err != nil {
		return "", "", err
	}
	return pub, priv, writeKey(priv, key)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
