package certs

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Signers nodehub asks for.
const (
	SignerClient  = "kubernetes.io/kube-apiserver-client-kubelet"
	SignerServing = "kubernetes.io/kubelet-serving"
	// SignerAPIClient is used when --hub-cert-organizations adds organizations: the kubelet
	// client signer (and its auto-approver) accept exactly O=system:nodes, so such a request goes
	// to the general client signer, which the cluster's approver (OpenYurt's yurt-manager, or an
	// admin) approves.
	SignerAPIClient = "kubernetes.io/kube-apiserver-client"
)

var errExpired = errors.New("certs: certificate expired")

// ErrDenied is returned when a CSR is denied or fails.
var ErrDenied = errors.New("certs: certificate request denied")

// CSRSpec is what one certificate request asks for.
type CSRSpec struct {
	Signer string
	CN     string
	Orgs   []string
	Usages []string
	DNS    []string
	IPs    []net.IP
}

// apiClient is a minimal REST client for one server with one credential: a client certificate
// (through tlsCfg) or a bearer token.
type apiClient struct {
	server string
	token  string
	http   *http.Client
	count  OnBytes // nil: not counted
}

// OnBytes, if set, is told the body bytes exchanged with the cloud: direction "sent" (a request's
// body) or "received" (an answer's); the hub counts them (nodehub_cloud_bytes_total, purpose
// "certs").
type OnBytes func(direction string, n int)

func (f OnBytes) add(direction string, n int) {
	if f != nil && n > 0 {
		f(direction, n)
	}
}

func newAPIClient(server string, tlsCfg *tls.Config, token string, timeout time.Duration, count OnBytes) *apiClient {
	// Keep-alive: a pending CSR is polled on one connection, not a TLS handshake per poll. The
	// clients are short-lived; an idle connection goes after 90 s (or when the CSR is done).
	return &apiClient{server: server, token: token, count: count, http: &http.Client{Timeout: timeout,
		Transport: &http.Transport{TLSClientConfig: tlsCfg, MaxIdleConnsPerHost: 1, IdleConnTimeout: 90 * time.Second}}}
}

// do sends a JSON request and decodes a 2xx JSON answer into out.
func (c *apiClient) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
		c.count.add("sent", len(b))
	}
	req, err := http.NewRequestWithContext(ctx, method, c.server+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "nodehub")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	c.count.add("received", len(data))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return &apiError{Code: resp.StatusCode, Msg: statusMessage(data)}
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

type apiError struct {
	Code int
	Msg  string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Code, http.StatusText(e.Code), e.Msg)
}

// csrObject is the part of a certificates.k8s.io/v1 CertificateSigningRequest nodehub writes
// and reads.
type csrObject struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Metadata   struct {
		Name         string `json:"name,omitempty"`
		GenerateName string `json:"generateName,omitempty"`
	} `json:"metadata"`
	Spec struct {
		Request    []byte   `json:"request"`
		SignerName string   `json:"signerName"`
		Usages     []string `json:"usages"`
	} `json:"spec"`
	Status struct {
		Conditions []struct {
			Type    string `json:"type"`
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"conditions"`
		Certificate []byte `json:"certificate"`
	} `json:"status"`
}

const csrPath = "/apis/certificates.k8s.io/v1/certificatesigningrequests"

// requestCertificate generates an ECDSA P-256 key on the device, creates a CSR for spec and
// waits (polling, until ctx ends) for it to be approved and issued. It returns the PEM of the
// certificate followed by the key.
func requestCertificate(ctx context.Context, c *apiClient, spec CSRSpec, onCreated func(name string)) ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: spec.CN, Organization: spec.Orgs},
		DNSNames:    spec.DNS,
		IPAddresses: spec.IPs,
	}, key)
	if err != nil {
		return nil, fmt.Errorf("certs: CSR: %w", err)
	}
	var in csrObject
	in.APIVersion, in.Kind = "certificates.k8s.io/v1", "CertificateSigningRequest"
	in.Metadata.GenerateName = "nodehub-csr-"
	in.Spec.Request = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	in.Spec.SignerName, in.Spec.Usages = spec.Signer, spec.Usages
	var created csrObject
	if err := c.do(ctx, http.MethodPost, csrPath, &in, &created); err != nil {
		return nil, fmt.Errorf("certs: create CSR: %w", err)
	}
	name := created.Metadata.Name
	if onCreated != nil {
		onCreated(name)
	}
	defer c.http.CloseIdleConnections()
	// Polled quickly at first (an auto-approved CSR is issued within seconds), then from 30 s
	// after it has waited a minute, doubling up to 5 minutes (a kubelet-serving CSR may wait for a
	// person or a controller for days: each poll costs ~2 KB of uplink, 6 MiB a day at 30 s).
	wait, since := 500*time.Millisecond, time.Now()
	cur := created
	for {
		for _, cond := range cur.Status.Conditions {
			if cond.Type == "Denied" || cond.Type == "Failed" {
				return nil, fmt.Errorf("%w: %s %s: %s %s", ErrDenied, name, cond.Type, cond.Reason, cond.Message)
			}
		}
		if len(cur.Status.Certificate) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("certs: CSR %s not issued: %w", name, ctx.Err())
		case <-time.After(wait):
		}
		switch {
		case time.Since(since) <= time.Minute:
			wait = min(wait*2, 5*time.Second)
		case wait < 30*time.Second:
			wait = 30 * time.Second
		default:
			wait = min(wait*2, 5*time.Minute)
		}
		cur = csrObject{}
		if err := c.do(ctx, http.MethodGet, csrPath+"/"+name, nil, &cur); err != nil {
			var ae *apiError
			if errors.As(err, &ae) && ae.Code == http.StatusNotFound {
				return nil, fmt.Errorf("certs: CSR %s disappeared before it was issued", name)
			}
			if ctx.Err() != nil {
				return nil, fmt.Errorf("certs: CSR %s not issued: %w", name, ctx.Err())
			}
			continue // a transient error: poll again
		}
	}
	kp, err := keyPEM(key)
	if err != nil {
		return nil, err
	}
	out := append(append([]byte{}, cur.Status.Certificate...), kp...)
	if _, err := parsePair(out, time.Now()); err != nil {
		return nil, fmt.Errorf("certs: CSR %s issued an unusable certificate: %w", name, err)
	}
	return out, nil
}
