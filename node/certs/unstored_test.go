package certs

import (
	"context"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// An issued certificate whose store fails (a full or read-only disk) is used from memory and its
// write retried; it is not thrown away for a new CSR.
func TestIssuedCertificateKeptWhenItsStoreFails(t *testing.T) {
	root := t.TempDir()
	blocker := filepath.Join(root, "pki")
	if err := os.WriteFile(blocker, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(blocker, "sub") // cannot be created: its parent is a file
	m := NewManager(ManagerConfig{Dir: dir, NodeName: "n"})
	ca, _ := selfSigned(t, "ca", true)
	certPEM, keyPEM := selfSigned(t, "system:node:n", false)
	pemData := append(certPEM, keyPEM...)
	pair, err := parsePair(pemData, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	m.adopt(pair, ca, pool, pemData)
	if c, err := m.GetClientCertificate(nil); err != nil || c != pair || m.Err() != nil || m.CAPool() != pool {
		t.Fatalf("the issued certificate is not in use: %v, %v", err, m.Err())
	}
	if m.unstored == nil {
		t.Fatal("the failed store is not retried")
	}
	// Run retries the write, not a bootstrap.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	time.Sleep(100 * time.Millisecond)
	cancel()
	if err := <-done; err != nil || m.Err() != nil {
		t.Fatalf("Run: %v; Err %v", err, m.Err())
	}
	// Once the disk takes it, the write succeeds.
	os.Remove(blocker)
	if stored, ok := m.unstored.retry(context.Background(), m.log, "client certificate", time.Now().Add(time.Hour)); !stored || !ok {
		t.Fatal("the retried store failed")
	}
	if got, err := os.ReadFile(filepath.Join(dir, ClientPEMName)); err != nil || string(got) != string(pemData) {
		t.Fatalf("stored: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, CAName)); err != nil || string(got) != string(ca) {
		t.Fatalf("CA stored: %v", err)
	}
}
