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
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
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
	stream *http.Client // http without its Timeout, on the same Transport: watches
	count  OnBytes      // nil: not counted
	// watchLasted: a CSR's watch that ends or fails sooner counts as failed (watchFailures in a
	// row: polled instead).
	watchLasted time.Duration
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
	// Keep-alive: a pending CSR's watches (and the GET between them) share one connection, not a
	// TLS handshake each. The clients are short-lived; an idle connection goes after 90 s (or when
	// the CSR is done).
	tr := &http.Transport{TLSClientConfig: tlsCfg, MaxIdleConnsPerHost: 1, IdleConnTimeout: 90 * time.Second}
	return &apiClient{server: server, token: token, count: count, http: &http.Client{Timeout: timeout, Transport: tr},
		stream: &http.Client{Transport: tr}, watchLasted: time.Minute}
}

// maxAnswer bounds an answer's body, and each event of a watch.
const maxAnswer = 4 << 20

func (c *apiClient) request(ctx context.Context, method, path string, in any) (*http.Request, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
		c.count.add("sent", len(b))
	}
	req, err := http.NewRequestWithContext(ctx, method, c.server+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "nodehub")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// do sends a JSON request and decodes a 2xx JSON answer into out.
func (c *apiClient) do(ctx context.Context, method, path string, in, out any) error {
	req, err := c.request(ctx, method, path, in)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
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
		Name            string `json:"name,omitempty"`
		GenerateName    string `json:"generateName,omitempty"`
		ResourceVersion string `json:"resourceVersion,omitempty"`
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
// waits (until ctx ends) for it to be approved and issued. It returns the PEM of the certificate
// followed by the key.
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
	cur, err := waitIssued(ctx, c, &created)
	if err != nil {
		return nil, err
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

// settled reports whether the CSR is issued (true, nil) or denied or failed (ErrDenied).
func settled(cur *csrObject) (bool, error) {
	for _, cond := range cur.Status.Conditions {
		if cond.Type == "Denied" || cond.Type == "Failed" {
			return true, fmt.Errorf("%w: %s %s: %s %s", ErrDenied, cur.Metadata.Name, cond.Type, cond.Reason, cond.Message)
		}
	}
	return len(cur.Status.Certificate) > 0, nil
}

var errCSRDeleted = errors.New("deleted")

func disappeared(name string) error {
	return fmt.Errorf("certs: CSR %s disappeared before it was issued", name)
}

// watchFailures is how many watches in a row may fail or end without lasting the client's
// watchLasted before the CSR is polled instead.
const watchFailures = 3

// waitIssued waits for created to be issued, as kubelet does: a watch of the one CSR from the
// create's resourceVersion, each lasting ~10 minutes (jittered), then one GET (a re-check and a
// fresh resourceVersion) and the next watch, all on one keep-alive connection. An idle pending
// CSR costs a GET and a watch's request every ~10 minutes (a kubelet-serving CSR may wait for a
// person or a controller for days). A watch the server refuses (403/404/405: an old server, a
// credential without watch permission) or that fails watchFailures times in a row falls back to
// polling.
func waitIssued(ctx context.Context, c *apiClient, created *csrObject) (*csrObject, error) {
	name, cur, since := created.Metadata.Name, created, time.Now()
	failures, backoff := 0, time.Second
	fresh := true // cur's resourceVersion is where the next watch starts
	for failures < watchFailures {
		if done, err := settled(cur); done || err != nil {
			return cur, err
		}
		if !fresh || cur.Metadata.ResourceVersion == "" {
			var got csrObject
			if err := c.do(ctx, http.MethodGet, csrPath+"/"+name, nil, &got); err != nil {
				if ae := (*apiError)(nil); errors.As(err, &ae) && ae.Code == http.StatusNotFound {
					return nil, disappeared(name)
				}
				if ctx.Err() != nil {
					return nil, fmt.Errorf("certs: CSR %s not issued: %w", name, ctx.Err())
				}
				failures++
				if !sleepCtx(ctx, backoff) {
					return nil, fmt.Errorf("certs: CSR %s not issued: %w", name, ctx.Err())
				}
				backoff *= 2
				continue
			}
			if got.Metadata.ResourceVersion == "" {
				cur = &got
				break // nothing to watch from: poll
			}
			cur, fresh = &got, true
			continue
		}
		start := time.Now()
		got, err := c.watchCSR(ctx, name, cur.Metadata.ResourceVersion, 8*time.Minute+mrand.N(4*time.Minute))
		fresh = false
		var ae *apiError
		switch {
		case got != nil:
			return got, err // settled (issued, or ErrDenied)
		case errors.Is(err, errCSRDeleted):
			return nil, disappeared(name)
		case ctx.Err() != nil:
			return nil, fmt.Errorf("certs: CSR %s not issued: %w", name, ctx.Err())
		case errors.As(err, &ae) && (ae.Code == http.StatusForbidden || ae.Code == http.StatusNotFound || ae.Code == http.StatusMethodNotAllowed):
			failures = watchFailures // refused: poll
		case time.Since(start) >= c.watchLasted:
			// Its timeout (or a cut, or its resourceVersion expired, after a while): GET, watch again.
			failures, backoff = 0, time.Second
		case errors.As(err, &ae) && ae.Code == http.StatusGone:
			failures++ // its resourceVersion too old at once: GET (a fresh one), watch again
		default:
			// Failed, or ended, at once: again after a pause, then poll.
			failures++
			if failures < watchFailures && !sleepCtx(ctx, backoff) {
				return nil, fmt.Errorf("certs: CSR %s not issued: %w", name, ctx.Err())
			}
			backoff *= 2
		}
	}
	return pollIssued(ctx, c, name, cur, since)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// pollIssued polls the CSR (when it cannot be watched): quickly in its first minute (an
// auto-approved CSR is issued within seconds), then from 30 s, doubling up to 5 minutes (each
// poll costs ~2.5 KB of downlink plus, after 90 s idle, a TLS handshake).
func pollIssued(ctx context.Context, c *apiClient, name string, cur *csrObject, since time.Time) (*csrObject, error) {
	wait := 500 * time.Millisecond
	for {
		if done, err := settled(cur); done || err != nil {
			return cur, err
		}
		if !sleepCtx(ctx, wait) {
			return nil, fmt.Errorf("certs: CSR %s not issued: %w", name, ctx.Err())
		}
		switch {
		case time.Since(since) <= time.Minute:
			wait = min(wait*2, 5*time.Second)
		case wait < 30*time.Second:
			wait = 30 * time.Second
		default:
			wait = min(wait*2, 5*time.Minute)
		}
		var got csrObject
		if err := c.do(ctx, http.MethodGet, csrPath+"/"+name, nil, &got); err != nil {
			var ae *apiError
			if errors.As(err, &ae) && ae.Code == http.StatusNotFound {
				return nil, disappeared(name)
			}
			if ctx.Err() != nil {
				return nil, fmt.Errorf("certs: CSR %s not issued: %w", name, ctx.Err())
			}
			continue // a transient error: poll again
		}
		cur = &got
	}
}

// watchCSR watches CSR name from resourceVersion rv for up to timeout. It returns the object
// once an event settles it (issued; denied or failed with ErrDenied), errCSRDeleted when it is
// deleted, nil and nil when the watch ends (its timeout), an *apiError when the server refuses
// the watch or sends an ERROR event (410: rv too old), another error when the connection fails.
// Each event is bounded by maxAnswer; all bytes read are counted.
func (c *apiClient) watchCSR(ctx context.Context, name, rv string, timeout time.Duration) (*csrObject, error) {
	// The request is bounded by its context (the server ends it after timeoutSeconds), not by
	// c.http's Timeout; a watch read to its end leaves the connection for the next request.
	ctx, cancel := context.WithTimeout(ctx, timeout+30*time.Second)
	defer cancel()
	q := url.Values{"fieldSelector": {"metadata.name=" + name}, "watch": {"1"}, "resourceVersion": {rv},
		"timeoutSeconds": {strconv.Itoa(int(timeout / time.Second))}}
	req, err := c.request(ctx, http.MethodGet, csrPath+"?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.stream.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
		c.count.add("received", len(data))
		if err != nil {
			return nil, err
		}
		return nil, &apiError{Code: resp.StatusCode, Msg: statusMessage(data)}
	}
	return c.csrEvents(resp.Body, name)
}

// csrEvents reads the watch's events of CSR name until one settles it, deletes it or is an
// ERROR, or the stream ends (nil and nil).
func (c *apiClient) csrEvents(r io.Reader, name string) (*csrObject, error) {
	body := &eventReader{r: r, count: c.count}
	dec := json.NewDecoder(body)
	for {
		body.left = maxAnswer
		var ev struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, nil
			}
			return nil, fmt.Errorf("certs: watch of CSR %s: %w", name, err)
		}
		if cur, done, err := csrEvent(ev.Type, ev.Object, name); done {
			return cur, err
		}
	}
}

// csrEvent reads one watch event of CSR name: done when it settles the CSR (cur; an error for a
// denied or failed one), deletes it (errCSRDeleted) or is an ERROR (*apiError).
func csrEvent(typ string, object []byte, name string) (cur *csrObject, done bool, err error) {
	switch typ {
	case "ADDED", "MODIFIED":
		cur = new(csrObject)
		if err := json.Unmarshal(object, cur); err != nil {
			return nil, true, fmt.Errorf("certs: watch of CSR %s: %w", name, err)
		}
		if cur.Metadata.Name != name {
			return nil, false, nil
		}
		if done, err := settled(cur); done || err != nil {
			return cur, true, err
		}
	case "DELETED":
		return nil, true, errCSRDeleted
	case "ERROR":
		var st struct {
			Code int `json:"code"`
		}
		_ = json.Unmarshal(object, &st)
		return nil, true, &apiError{Code: st.Code, Msg: statusMessage(object)}
	}
	return nil, false, nil
}

var errEventTooLarge = errors.New("event larger than 4 MiB")

// eventReader counts the bytes read and stops a watch whose event exceeds left.
type eventReader struct {
	r     io.Reader
	left  int
	count OnBytes
}

func (e *eventReader) Read(p []byte) (int, error) {
	if e.left <= 0 {
		return 0, errEventTooLarge
	}
	if len(p) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= n
	e.count.add("received", n)
	return n, err
}
