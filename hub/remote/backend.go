// Package remote sends requests to the cloud kube-apiservers: one Backend per server (its
// transports and health), a Balancer that picks a healthy one per request, and a Checker that
// keeps each server's health by heartbeat.
package remote

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"nodehub/wire"
)

// Identity says which credentials a forwarded request carries.
type Identity int

const (
	// Passthrough sends the request with its own headers (a bearer token, or nothing) and verifies
	// the server with the cluster CA only. It is the default: no request gets the node's
	// certificate unless the hub says so.
	Passthrough Identity = iota
	// Node presents the node's client certificate.
	Node
)

// Route says how the Balancer sends one request.
type Route struct {
	// Identity is the credential the request carries.
	Identity Identity
	// Stream sends the request over the server's shared HTTP/2 connection: a long-lived response
	// (a watch), so a node's many watches cost one TCP connection, or a sporadic request that
	// should not pay a handshake of its own. Other requests (the clients' bursts) use a small
	// pool of HTTP/1.1 keep-alive connections, which costs less CPU per request.
	Stream bool
	// HeaderTimeout, with OnSlow, bounds the wait for response headers: when it passes, OnSlow is
	// asked whether to give up; if it says yes the request is cancelled, the server is marked
	// suspect (a black-holed link is noticed this way while clients are active) and RoundTrip
	// returns ErrSlow. The hub uses it for reads it can answer from its cache.
	HeaderTimeout time.Duration
	OnSlow        func() bool
}

// Rotating is implemented by wire.Credentials whose client certificate changes: when Generation
// changes, the node's connections are replaced (new requests dial with the new certificate; the
// old connections end once idle), so a renewed certificate is used at once and an old one is
// not presented until it expires.
type Rotating interface {
	Generation() uint64
}

// Backend is one cloud kube-apiserver.
type Backend struct {
	// URL is the server's scheme://host:port.
	URL *url.URL
	// Name is host:port, used in logs and metrics.
	Name string

	creds       wire.Credentials
	dialTimeout time.Duration

	mu         sync.Mutex
	transports [5]transport // [identity*2 + http2], and the probes' (pingSlot)
	nodeGen    uint64       // the credentials' Generation the node transports were made for

	health health
}

// NewBackend parses a server address ("host:port" means https) and prepares a backend for it.
func NewBackend(addr string, creds wire.Credentials, dialTimeout time.Duration) (*Backend, error) {
	u, err := ParseServerAddr(addr)
	if err != nil {
		return nil, err
	}
	b := &Backend{URL: u, Name: u.Host, creds: creds, dialTimeout: dialTimeout}
	b.health.init()
	return b, nil
}

// ParseServerAddr reads one --server-addr entry: https://host:port, http://host:port, or host:port
// (https). The port defaults to 443 for https and 80 for http.
func ParseServerAddr(addr string) (*url.URL, error) {
	addr = strings.TrimSpace(addr)
	if addr == "" {
		return nil, errors.New("empty server address")
	}
	if !strings.Contains(addr, "://") {
		addr = "https://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return nil, errors.New("scheme must be https or http: " + addr)
	}
	if u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, errors.New("want scheme://host:port: " + addr)
	}
	if u.Port() == "" {
		port := "443"
		if u.Scheme == "http" {
			port = "80"
		}
		u.Host = net.JoinHostPort(u.Hostname(), port)
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host}, nil
}

// ErrNoCredentials is returned while the cluster CA (or, for the node identity, the client
// certificate) is not available.
var ErrNoCredentials = errors.New("remote: cluster credentials not loaded")

// RoundTrip sends req to this server as route says. It does not alter req: the URL is rewritten
// on a shallow copy.
func (b *Backend) RoundTrip(route Route, req *http.Request) (*http.Response, error) {
	if route.Identity == Node && b.URL.Scheme == "https" {
		if _, err := b.creds.GetClientCertificate(nil); err != nil {
			if req.Body != nil {
				req.Body.Close()
			}
			return nil, fmt.Errorf("%w: %v", ErrNoCredentials, err) // not the server's fault
		}
	}
	return b.roundTripSlot(transportSlot(route.Identity, route.Stream && !isUpgrade(req)), req)
}

// pingSlot is the transport of Ping: the node's identity over HTTP/1.1, apart from the requests'
// connections (a probe answers for the path to the server, not for one pooled connection) and
// with a small TLS hello (see transport).
const pingSlot = 4

func transportSlot(id Identity, h2 bool) int {
	i := int(id) * 2
	if h2 {
		i++
	}
	return i
}

func (b *Backend) roundTripSlot(slot int, req *http.Request) (*http.Response, error) {
	t, err := b.transport(slot)
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	out := *req
	u := *req.URL
	u.Scheme, u.Host = b.URL.Scheme, b.URL.Host
	out.URL, out.Host = &u, ""
	return t.RoundTrip(&out)
}

// transport is slot i's transport (an identity over HTTP/1.1 or HTTP/2, or the probes'), made
// on first use; the node's are made afresh after its certificate changed.
func (b *Backend) transport(i int) (transport, error) {
	id, h2 := Identity(i/2), i%2 == 1
	if i == pingSlot {
		id, h2 = Node, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if id == Node {
		b.rotateLocked()
	}
	if t := b.transports[i]; t != nil {
		return t, nil
	}
	tlsCfg, err := b.tlsConfig(id, i == pingSlot)
	if err != nil {
		return nil, err
	}
	var t transport = b.newTransport(tlsCfg, h2)
	if !h2 && i != pingSlot {
		// The requests' HTTP/1.1 slots: GETs on the caller's goroutine (h1.go).
		t = newH1Transport(b.URL.Host, b.dialer(), tlsCfg, t.(*http.Transport))
	}
	b.transports[i] = t
	return t, nil
}

// transport is a slot's: a net/http Transport, or h1Transport in front of one.
type transport interface {
	http.RoundTripper
	CloseIdleConnections()
}

// dialer dials the server's connections.
func (b *Backend) dialer() *net.Dialer {
	return &net.Dialer{Timeout: b.dialTimeout, KeepAlive: 30 * time.Second}
}

// rotateLocked drops the node's transports when its client certificate changed.
func (b *Backend) rotateLocked() {
	r, ok := b.creds.(Rotating)
	if !ok {
		return
	}
	if g := r.Generation(); g != b.nodeGen {
		// A new client certificate: requests in flight finish on their connections (the
		// old certificate is still valid: renewal happens at 70–90% of its life); idle
		// ones close now, busy ones when the old transport's idle timeout passes.
		for _, j := range []int{transportSlot(Node, false), transportSlot(Node, true), pingSlot} {
			if old := b.transports[j]; old != nil {
				old.CloseIdleConnections()
				b.transports[j] = nil
			}
		}
		b.nodeGen = g
	}
}

// tlsConfig is the TLS configuration of identity id's connections (ping: the probes'); nil for a
// plain-HTTP server.
func (b *Backend) tlsConfig(id Identity, ping bool) (*tls.Config, error) {
	if b.URL.Scheme != "https" {
		return nil, nil
	}
	pool := b.creds.CAPool()
	if pool == nil {
		return nil, ErrNoCredentials
	}
	// Resumed sessions: a new connection (a client's request after its keep-alive one went
	// idle, every connection after an outage) skips the server's certificate and signature:
	// ~1 KB less from the cloud, and less of the apiserver's CPU when a region comes back.
	tlsCfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, ClientSessionCache: tls.NewLRUClientSessionCache(8)}
	if id == Node {
		tlsCfg.GetClientCertificate = b.creds.GetClientCertificate
	}
	if ping {
		// While the link is down every probe is a new connection: without the post-quantum
		// key share Go sends by default, its hello is ~0.3 KB instead of ~1.5 KB. A probe
		// carries nothing secret (GET /readyz; the node's certificate is public).
		tlsCfg.CurvePreferences = []tls.CurveID{tls.X25519, tls.CurveP256}
	}
	return tlsCfg, nil
}

// newTransport is a transport to the server with tlsCfg, HTTP/2 when h2.
func (b *Backend) newTransport(tlsCfg *tls.Config, h2 bool) *http.Transport {
	t := &http.Transport{
		DialContext:           b.dialer().DialContext,
		TLSClientConfig:       tlsCfg,
		TLSHandshakeTimeout:   10 * time.Second,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		// Bodies pass through as the cloud sent them; a client that asked for gzip gets gzip.
		DisableCompression: true,
		ForceAttemptHTTP2:  h2,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: 30 * time.Second,
			PingTimeout:     15 * time.Second,
		},
	}
	if !h2 {
		// HTTP/1.1 only: also what SPDY and WebSocket upgrades (exec, attach, port-forward) need.
		t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return t
}

// CloseIdle closes idle connections of every transport (after a failure, so the next request dials
// afresh instead of reusing a dead connection).
func (b *Backend) CloseIdle() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, t := range b.transports {
		if t != nil {
			t.CloseIdleConnections()
		}
	}
}

// closeIdleRequests closes the idle connections requests use, not the probes' (which just proved
// themselves): when a server turns healthy again, the connections that lived through the outage
// (their streams were cancelled when it began) are not trusted with new requests.
func (b *Backend) closeIdleRequests() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, t := range b.transports {
		if t != nil && i != pingSlot {
			t.CloseIdleConnections()
		}
	}
}

func isUpgrade(r *http.Request) bool {
	return r.Header.Get("Upgrade") != "" && wire.HeaderHasToken(r.Header.Get("Connection"), "upgrade")
}

// Healthy reports whether the server is healthy (the balancer's first choice).
func (b *Backend) Healthy() bool { return b.health.get() == Healthy }

// State is the server's health: Unknown until its first probe answers or fails.
func (b *Backend) State() State { return b.health.get() }

// Reached reports whether the server ever answered a probe.
func (b *Backend) Reached() bool { return b.health.reached.Load() }

// LastError is the error of the last failed probe or suspected request (nil after a good probe).
func (b *Backend) LastError() error {
	b.health.mu.Lock()
	defer b.health.mu.Unlock()
	return b.health.lastErr
}

// pingPath is the Checker's default small request: the apiserver's readiness, a few bytes, exempt
// from API priority and fairness (never queued behind a busy server's requests), readable by every
// client (system:public-info-viewer).
const pingPath = "/readyz"

// Ping sends one GET /readyz with the node's identity: nil when the server answers with anything
// but a gateway error (502, 503, 504: a load balancer in front of it with no server behind). A
// probe asks whether the server can be reached; "not ready" (500: a readiness check failing, as
// happens for seconds on a loaded server) is still an answer, and the heartbeat, a real write,
// judges the rest.
func (b *Backend) Ping(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://cloud"+pingPath, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "nodehub")
	if b.URL.Scheme == "https" {
		if _, err := b.creds.GetClientCertificate(nil); err != nil {
			return fmt.Errorf("%w: %v", ErrNoCredentials, err)
		}
	}
	resp, err := b.roundTripSlot(pingSlot, req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return fmt.Errorf("%s answered %d", pingPath, resp.StatusCode)
	}
	return nil
}
