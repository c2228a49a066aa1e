package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// selfSigned returns cert and key PEM for cn.
func selfSigned(t *testing.T, cn string, isCA bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: isCA, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func TestKubeletFilesFromKubeconfig(t *testing.T) {
	dir := t.TempDir()
	ca, _ := selfSigned(t, "ca", true)
	kc := `apiVersion: v1
kind: Config
clusters:
- name: default-cluster
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority-data: ` + base64.StdEncoding.EncodeToString(ca) + `
contexts:
- name: default-context
  context: {cluster: default-cluster, user: default-auth}
current-context: default-context
users:
- name: default-auth
  user:
    client-certificate: pki/kubelet-client-current.pem
    client-key: pki/kubelet-client-current.pem
`
	path := filepath.Join(dir, "kubelet.conf")
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	f := KubeletFiles(path, "", "", "")
	if string(f.CAData) != string(ca) || f.CertFile != filepath.Join(dir, "pki/kubelet-client-current.pem") || f.KeyFile != f.CertFile {
		t.Fatalf("files %+v", f)
	}
	f = KubeletFiles(path, "/x/c.pem", "", "/x/ca.crt")
	if f.CertFile != "/x/c.pem" || f.KeyFile != "/x/c.pem" || f.CAFile != "/x/ca.crt" || f.CAData != nil {
		t.Fatalf("overrides %+v", f)
	}
	f = KubeletFiles(filepath.Join(dir, "missing.conf"), "", "", "")
	if f.CertFile != KubeletClientPEM || f.CAFile != KubeletCAFile {
		t.Fatalf("defaults %+v", f)
	}
}

func TestSourceReloadsRotatedCertificate(t *testing.T) {
	dir := t.TempDir()
	ca, _ := selfSigned(t, "ca", true)
	caFile, pemFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "client.pem")
	os.WriteFile(caFile, ca, 0o600)

	s := NewSource(Files{CertFile: pemFile, KeyFile: pemFile, CAFile: caFile})
	if s.Err() == nil {
		t.Fatal("missing certificate not reported")
	}
	c1, k1 := selfSigned(t, "system:node:a", false)
	os.WriteFile(pemFile, append(c1, k1...), 0o600)
	clock := time.Now()
	s.now = func() time.Time { return clock }
	clock = clock.Add(time.Minute)
	if err := s.Err(); err != nil {
		t.Fatalf("after the file appeared: %v", err)
	}
	first, _ := s.Certificate()

	c2, k2 := selfSigned(t, "system:node:a", false)
	os.WriteFile(pemFile, append(c2, k2...), 0o600)
	future := time.Now().Add(time.Hour)
	os.Chtimes(pemFile, future, future)
	if cur, _ := s.Certificate(); cur != first {
		t.Fatal("re-read before reloadEvery passed")
	}
	clock = clock.Add(reloadEvery + time.Second)
	cur, err := s.Certificate()
	if err != nil || cur == first {
		t.Fatalf("rotated certificate not picked up: %v", err)
	}
	// A broken write keeps the last good certificate.
	os.WriteFile(pemFile, []byte("garbage"), 0o600)
	os.Chtimes(pemFile, future.Add(time.Hour), future.Add(time.Hour))
	clock = clock.Add(reloadEvery + time.Second)
	if again, _ := s.Certificate(); again != cur || s.Err() != nil {
		t.Fatal("garbage replaced the last good certificate")
	}
	if s.CAPool() == nil {
		t.Fatal("no CA pool")
	}
}
