package certs

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"
	"time"

	"nodehub/internal/certtest"
)

// selfSigned returns cert and key PEM for cn.
func selfSigned(t *testing.T, cn string, isCA bool) (certPEM, keyPEM []byte) {
	t.Helper()
	der, key := certtest.SelfSigned(t, &x509.Certificate{Subject: pkix.Name{CommonName: cn}, IsCA: isCA, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign})
	return certtest.CertPEM(der), certtest.KeyPEM(t, key)
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

// kubelet writes a rotated certificate and its key one after the other: a load that failed on
// the first is tried again once the second is there; the key and the CA files are watched too.
func TestSourceRetriesAFailedReloadAndWatchesKeyAndCA(t *testing.T) {
	dir := t.TempDir()
	ca1, _ := selfSigned(t, "ca", true)
	caFile, certFile, keyFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	c1, k1 := selfSigned(t, "system:node:a", false)
	os.WriteFile(caFile, ca1, 0o600)
	os.WriteFile(certFile, c1, 0o600)
	os.WriteFile(keyFile, k1, 0o600)
	s := NewSource(Files{CertFile: certFile, KeyFile: keyFile, CAFile: caFile})
	first, err := s.Certificate()
	if err != nil {
		t.Fatal(err)
	}
	firstPool := s.CAPool()
	clock := time.Now()
	s.now = func() time.Time { return clock }
	touch := func(path string, data []byte, at time.Duration) {
		os.WriteFile(path, data, 0o600)
		ts := time.Now().Add(at)
		os.Chtimes(path, ts, ts)
	}

	c2, k2 := selfSigned(t, "system:node:a", false)
	touch(certFile, c2, time.Hour) // the new certificate, the old key: cannot load
	clock = clock.Add(reloadEvery + time.Second)
	if cur, err := s.Certificate(); err != nil || cur != first {
		t.Fatalf("a half-written rotation: %v, want the previous certificate", err)
	}
	touch(keyFile, k2, 2*time.Hour) // the key follows
	clock = clock.Add(reloadEvery + time.Second)
	cur, err := s.Certificate()
	if err != nil || cur == first {
		t.Fatalf("the completed rotation was never loaded: %v", err)
	}
	if string(cur.Certificate[0]) == string(first.Certificate[0]) {
		t.Fatal("same certificate")
	}

	touch(caFile, []byte("garbage"), time.Hour)
	clock = clock.Add(reloadEvery + time.Second)
	if s.CAPool() != firstPool || s.Err() != nil {
		t.Fatal("a broken CA file replaced the loaded pool")
	}
	ca2, _ := selfSigned(t, "ca2", true)
	touch(caFile, append(ca1, ca2...), 2*time.Hour)
	clock = clock.Add(reloadEvery + time.Second)
	if s.CAPool() == firstPool {
		t.Fatal("a changed CA file was not reloaded")
	}
}
