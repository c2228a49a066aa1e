package remote

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"nodehub/internal/certtest"
)

// tlsCreds trusts one test server and presents one client certificate.
type tlsCreds struct {
	pool *x509.CertPool
	cert *tls.Certificate
}

func (c tlsCreds) CAPool() *x509.CertPool { return c.pool }
func (c tlsCreds) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return c.cert, nil
}

func clientCert(t *testing.T) *tls.Certificate {
	t.Helper()
	return certtest.SelfSignedTLS(t, certtest.NodeClient("a"))
}

// The node's requests marked Stream share the server's one HTTP/2 connection (a watch and the
// hub's sporadic requests pay no handshake of their own), and a connection made after the others
// closed resumes the TLS session, still presenting the node's certificate.
func TestStreamsShareOneConnectionAndNewConnectionsResume(t *testing.T) {
	type seen struct {
		proto   int
		resumed bool
		cert    bool
		remote  string
	}
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, seen{r.ProtoMajor, r.TLS.DidResume, len(r.TLS.PeerCertificates) == 1, r.RemoteAddr})
		mu.Unlock()
		_, _ = io.WriteString(w, "{}")
	}))
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	b, err := NewBackend(srv.URL, tlsCreds{pool, clientCert(t)}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	send := func(stream bool) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "/api/v1/nodes/a", nil)
		resp, err := b.RoundTrip(Route{Identity: Node, Stream: stream}, req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	send(true)
	send(true)
	send(true)
	b.CloseIdle()
	send(false) // a new connection (HTTP/1.1): the session the HTTP/2 one got is not its own
	send(false)
	b.CloseIdle()
	send(false)

	mu.Lock()
	defer mu.Unlock()
	if len(got) != 6 {
		t.Fatalf("%d requests seen, want 6", len(got))
	}
	for i, s := range got {
		if !s.cert {
			t.Errorf("request %d came without the node's certificate", i)
		}
	}
	if got[0].proto != 2 || got[1].remote != got[0].remote || got[2].remote != got[0].remote {
		t.Errorf("streams: %+v, want HTTP/2 on one connection", got[:3])
	}
	if got[3].proto != 1 || got[4].remote != got[3].remote {
		t.Errorf("short requests: %+v, want HTTP/1.1 kept alive", got[3:5])
	}
	if got[3].resumed || !got[5].resumed {
		t.Errorf("resumed: first HTTP/1.1 connection %v (want false), the next %v (want true)", got[3].resumed, got[5].resumed)
	}
}
