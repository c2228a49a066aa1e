package certs

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"nodehub/internal/certtest"
)

// fakeCSRServer serves the CSR API for one CSR: the create, GETs of it and watches, counting
// each kind. watch decides what the n-th watch (from 1) answers; issueOnGet makes GETs answer
// the issued certificate.
type fakeCSRServer struct {
	t          *testing.T
	srv        *httptest.Server
	ca         *certtest.CA
	watch      func(s *fakeCSRServer, w http.ResponseWriter, n int, rv string)
	issueOnGet bool

	mu      sync.Mutex
	obj     csrObject
	cert    []byte // PEM, signed at create
	creates int
	gets    int
	watches int
	conns   atomic.Int32
}

func newFakeCSRServer(t *testing.T, watch func(s *fakeCSRServer, w http.ResponseWriter, n int, rv string)) *fakeCSRServer {
	s := &fakeCSRServer{t: t, watch: watch}
	s.ca = certtest.NewCA(t, "ca")
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.srv.Start()
	t.Cleanup(s.srv.Close)
	return s
}

func (s *fakeCSRServer) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodPost && r.URL.Path == csrPath:
		var in csrObject
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		blk, _ := pem.Decode(in.Spec.Request)
		req, err := x509.ParseCertificateRequest(blk.Bytes)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: req.Subject, NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour)}
		der := s.ca.Sign(s.t, tmpl, req.PublicKey)
		s.mu.Lock()
		s.creates++
		s.obj = in
		s.obj.Metadata.Name, s.obj.Metadata.GenerateName, s.obj.Metadata.ResourceVersion = "nodehub-csr-abc", "", "10"
		s.cert = pemCert(der)
		out := s.obj
		s.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(out)
	case r.Method == http.MethodGet && r.URL.Path == csrPath+"/nodehub-csr-abc":
		s.mu.Lock()
		s.gets++
		out := s.obj
		if s.issueOnGet {
			out.Status.Certificate = s.cert
		}
		s.mu.Unlock()
		json.NewEncoder(w).Encode(out)
	case r.Method == http.MethodGet && r.URL.Path == csrPath && r.URL.Query().Get("watch") == "1":
		q := r.URL.Query()
		if q.Get("fieldSelector") != "metadata.name=nodehub-csr-abc" {
			s.t.Errorf("watch fieldSelector %q", q.Get("fieldSelector"))
		}
		if ts, _ := strconv.Atoi(q.Get("timeoutSeconds")); ts < 8*60 || ts > 12*60 {
			s.t.Errorf("watch timeoutSeconds %q", q.Get("timeoutSeconds"))
		}
		s.mu.Lock()
		s.watches++
		n := s.watches
		s.mu.Unlock()
		s.watch(s, w, n, q.Get("resourceVersion"))
	default:
		s.t.Errorf("unexpected %s %s", r.Method, r.URL)
		http.Error(w, "unexpected", 400)
	}
}

// event writes one watch event of the CSR, issued or with a condition, and flushes it.
func (s *fakeCSRServer) event(w http.ResponseWriter, typ string, issued bool, cond string) {
	s.mu.Lock()
	obj := s.obj
	s.mu.Unlock()
	if issued {
		obj.Status.Certificate = s.cert
	}
	if cond != "" {
		obj.Status.Conditions = append(obj.Status.Conditions, struct {
			Type    string `json:"type"`
			Reason  string `json:"reason"`
			Message string `json:"message"`
		}{cond, "Test", "by the test"})
	}
	json.NewEncoder(w).Encode(map[string]any{"type": typ, "object": obj})
	w.(http.Flusher).Flush()
}

func (s *fakeCSRServer) counts() (creates, gets, watches int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.creates, s.gets, s.watches
}

func (s *fakeCSRServer) request(t *testing.T, count OnBytes) ([]byte, error) {
	t.Helper()
	return s.requestWith(t, 30*time.Second, time.Minute, count)
}

// requestWith is request with the client's (non-watch) request timeout and how long a watch
// must last not to count as failed.
func (s *fakeCSRServer) requestWith(t *testing.T, timeout, watchLasted time.Duration, count OnBytes) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newAPIClient(s.srv.URL, nil, "", timeout, count)
	c.watchLasted = watchLasted
	return requestCertificate(ctx, c, CSRSpec{Signer: SignerClient, CN: "system:node:n", Orgs: []string{"system:nodes"}}, nil)
}

func TestCSRWatchedUntilIssuedWithoutPolling(t *testing.T) {
	s := newFakeCSRServer(t, func(s *fakeCSRServer, w http.ResponseWriter, n int, rv string) {
		if rv != "10" {
			t.Errorf("watch from resourceVersion %q, want the create's 10", rv)
		}
		s.event(w, "ADDED", false, "")
		time.Sleep(2500 * time.Millisecond) // the scenario: approved a while after the create, past the client's request timeout
		s.event(w, "MODIFIED", false, "Approved")
		s.event(w, "MODIFIED", true, "Approved")
	})
	var received atomic.Int64
	// The client's 1 s request timeout does not cut the watch.
	out, err := s.requestWith(t, time.Second, time.Minute, func(dir string, n int) {
		if dir == "received" {
			received.Add(int64(n))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parsePair(out, time.Now()); err != nil {
		t.Fatal(err)
	}
	if c, g, w := s.counts(); c != 1 || g != 0 || w != 1 {
		t.Fatalf("creates %d, GETs %d, watches %d; want 1, 0, 1", c, g, w)
	}
	// The certificate came through the watch: its bytes are counted.
	if received.Load() < int64(3*len(s.cert)) {
		t.Fatalf("received %d bytes counted, the watch alone sent more than %d", received.Load(), 3*len(s.cert))
	}
}

func TestCSRWatchEndedThenOneGetAndWatchAgainOnOneConnection(t *testing.T) {
	s := newFakeCSRServer(t, func(s *fakeCSRServer, w http.ResponseWriter, n int, rv string) {
		switch n {
		case 1, 3: // ends at its timeout without an event; the CSR changes meanwhile
			time.Sleep(300 * time.Millisecond) // the scenario: longer than the client's watchLasted
			s.mu.Lock()
			s.obj.Metadata.ResourceVersion = strconv.Itoa(10 + n)
			s.mu.Unlock()
		case 2: // ends at once: a failure, but the ones before and after are fine
			if rv != "11" {
				t.Errorf("second watch from %q, want the GET's 11", rv)
			}
		case 4:
			if rv != "13" {
				t.Errorf("fourth watch from %q, want the GET's 13", rv)
			}
			s.event(w, "MODIFIED", true, "Approved")
		default:
			t.Errorf("watch %d", n)
		}
	})
	if _, err := s.requestWith(t, 30*time.Second, 100*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	if c, g, w := s.counts(); c != 1 || g != 3 || w != 4 {
		t.Fatalf("creates %d, GETs %d, watches %d; want 1, 3, 4", c, g, w)
	}
	if n := s.conns.Load(); n != 1 {
		t.Fatalf("%d connections, want 1 kept alive for the create, the watches and the GET", n)
	}
}

func TestCSRWatchGoneThenGetAndWatchAgain(t *testing.T) {
	s := newFakeCSRServer(t, func(s *fakeCSRServer, w http.ResponseWriter, n int, rv string) {
		if n == 1 {
			json.NewEncoder(w).Encode(map[string]any{"type": "ERROR", "object": map[string]any{
				"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410, "reason": "Expired", "message": "too old resource version"}})
			return
		}
		s.event(w, "MODIFIED", true, "Approved")
	})
	if _, err := s.request(t, nil); err != nil {
		t.Fatal(err)
	}
	if c, g, w := s.counts(); c != 1 || g != 1 || w != 2 {
		t.Fatalf("creates %d, GETs %d, watches %d; want 1, 1, 2", c, g, w)
	}
}

func TestCSRWatchRefusedFallsBackToPolling(t *testing.T) {
	for _, code := range []int{http.StatusForbidden, http.StatusMethodNotAllowed} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			s := newFakeCSRServer(t, func(s *fakeCSRServer, w http.ResponseWriter, n int, rv string) {
				s.mu.Lock()
				s.issueOnGet = true
				s.mu.Unlock()
				w.WriteHeader(code)
				fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":%d,"message":"cannot watch"}`, code)
			})
			if _, err := s.request(t, nil); err != nil {
				t.Fatal(err)
			}
			if c, g, w := s.counts(); c != 1 || g != 1 || w != 1 {
				t.Fatalf("creates %d, GETs %d, watches %d; want 1, 1, 1", c, g, w)
			}
		})
	}
}

func TestCSRWatchDeletedOrDenied(t *testing.T) {
	s := newFakeCSRServer(t, func(s *fakeCSRServer, w http.ResponseWriter, n int, rv string) {
		s.event(w, "DELETED", false, "")
	})
	if _, err := s.request(t, nil); err == nil || !strings.Contains(err.Error(), "disappeared before it was issued") {
		t.Fatalf("deleted: err %v", err)
	}
	s = newFakeCSRServer(t, func(s *fakeCSRServer, w http.ResponseWriter, n int, rv string) {
		s.event(w, "MODIFIED", false, "Denied")
	})
	if _, err := s.request(t, nil); !errors.Is(err, ErrDenied) {
		t.Fatalf("denied: err %v", err)
	}
	if _, g, w := s.counts(); g != 0 || w != 1 {
		t.Fatalf("denied: GETs %d, watches %d", g, w)
	}
}

// A watch that keeps failing at once is not asked again and again: after watchFailures watches
// the CSR is polled (and issued to the poll).
func TestCSRWatchFailingAtOnceFallsBackToPolling(t *testing.T) {
	for name, fail := range map[string]func(w http.ResponseWriter){
		"cut mid-event": func(w http.ResponseWriter) {
			w.Write([]byte(`{"type":"MODIFIED","object":`))
			w.(http.Flusher).Flush()
		},
		"event too large": func(w http.ResponseWriter) {
			w.Write([]byte(`{"type":"MODIFIED","object":{"metadata":{"name":"` + strings.Repeat("x", maxAnswer+1) + `"}}}`))
		},
		"ends at once": func(http.ResponseWriter) {},
		"410 at once": func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusGone)
			w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":410,"reason":"Expired"}`))
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := newFakeCSRServer(t, func(s *fakeCSRServer, w http.ResponseWriter, n int, rv string) {
				if n == watchFailures {
					s.mu.Lock()
					s.issueOnGet = true
					s.mu.Unlock()
				}
				fail(w)
			})
			if _, err := s.request(t, nil); err != nil {
				t.Fatal(err)
			}
			if _, _, w := s.counts(); w != watchFailures {
				t.Fatalf("%d watches, want %d before polling", w, watchFailures)
			}
		})
	}
}
