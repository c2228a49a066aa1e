package hub

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"nodehub/hub/metrics"
)

// The serving certificate's exchanges with the cloud (the kubernetes Service's address, the CSR
// and its polls) are counted as purpose "certs" of nodehub_cloud_bytes_total, byte for byte.
func TestCertificateBytesAreCounted(t *testing.T) {
	cloud := newFakeCloud(t)
	var mu sync.Mutex
	var sent, received, csrs int
	answer := func(w http.ResponseWriter, code int, body string) {
		mu.Lock()
		received += len(body)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
	const pending = `{"apiVersion":"certificates.k8s.io/v1","kind":"CertificateSigningRequest","metadata":{"name":"nodehub-csr-1"},"status":{}}`
	cloud.handle = func(w http.ResponseWriter, r *http.Request) bool {
		switch {
		case r.URL.Path == "/api/v1/namespaces/default/services/kubernetes":
			answer(w, http.StatusOK, svcKube)
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/certificatesigningrequests"):
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			sent += len(b)
			csrs++
			mu.Unlock()
			answer(w, http.StatusCreated, pending)
		case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/certificatesigningrequests/nodehub-csr-1"):
			answer(w, http.StatusOK, pending) // not approved yet: polled again
		default:
			return false
		}
		return true
	}
	m := newHubMetrics(metrics.NewRegistry())
	_, part := ServingCertificate([]string{cloud.srv.URL}, "node-a", t.TempDir(), nil, newTLSNodeCreds(t, cloud.srv), slog.New(slog.DiscardHandler))
	part.bytes.attach(m, "certs")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = part.Run(ctx) }()
	defer func() { cancel(); <-done }()

	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		s, r, n := sent, received, csrs
		mu.Unlock()
		gotS, gotR := m.purposeBytes.Value("certs", "sent"), m.purposeBytes.Value("certs", "received")
		if n > 0 && gotS == float64(s) && gotR == float64(r) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("certs bytes counted: sent %v received %v; the cloud got %d and answered %d (%d CSRs)", gotS, gotR, s, r, n)
		}
	}
}
