package pool

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"nodehub/wire"
)

// PeerAddr is host:port of the pool port, where a leader serves its followers' lists and
// watches; "" when the pool has none (mode off, or a nil Pool: sharing off).
func (p *Pool) PeerAddr() string {
	if p == nil || p.cfg.Mode == ModeOff {
		return ""
	}
	return p.cfg.Addr
}

// PeerTLS is the pool port's TLS configuration: the hub's serving certificate, and as clients
// only node identities (CN system:node:*, O system:nodes) signed by the cluster CA.
func (p *Pool) PeerTLS() *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		ca := p.cfg.Credentials.CAPool()
		if ca == nil {
			return nil, errors.New("pool: cluster CA not loaded")
		}
		return &tls.Config{
			MinVersion:       tls.VersionTLS12,
			GetCertificate:   p.cfg.ServingCert,
			ClientAuth:       tls.RequireAndVerifyClientCert,
			ClientCAs:        ca,
			VerifyConnection: nodeOnly,
			NextProtos:       []string{"h2", "http/1.1"},
		}, nil
	}
	return base
}

// ServeHTTP is the pool port's handler (served with PeerTLS): a follower's list or watch from
// this leader's stores; a hub that is not the leader answers 503 so its caller goes elsewhere.
func (p *Pool) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.servePeer(w, r) }

// nodeOnly accepts a client certificate of a node: CN system:node:<name> in O system:nodes.
func nodeOnly(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("pool: no client certificate")
	}
	c := cs.PeerCertificates[0]
	if !strings.HasPrefix(c.Subject.CommonName, "system:node:") || !slices.Contains(c.Subject.Organization, "system:nodes") {
		return fmt.Errorf("pool: %q is not a node identity", c.Subject.CommonName)
	}
	return nil
}

// servePeer answers a follower's list or watch from this leader's stores.
func (p *Pool) servePeer(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == NotesPath {
		p.serveNotes(w, r)
		return
	}
	ri, err := wire.ParseRequest(r)
	if err != nil {
		wire.WriteStatus(w, wire.NegotiateAccept(r.Header.Get("Accept")), http.StatusBadRequest, err.Error())
		return
	}
	st := p.Store(ri)
	switch {
	case st == nil && p.stores[Of(ri)] == nil:
		wire.WriteStatus(w, ri.Accept, http.StatusNotFound, "nodehub: the pool port serves list and watch of the pool-scope resources only")
		return
	case st == nil || !p.Leading():
		wire.WriteStatus(w, ri.Accept, http.StatusServiceUnavailable, "nodehub: not the pool's leader")
		return
	case !p.online():
		// Its followers, cut off too in a region-wide outage, keep asking: every second, so they
		// carry on from this leader as soon as it is back (listwatch honours Retry-After).
		w.Header().Set("Retry-After", "1")
		wire.WriteStatus(w, ri.Accept, http.StatusServiceUnavailable, "nodehub: the pool's leader cannot reach the cloud")
		return
	}
	// Followers give a leader up after LeaderTimeout of silence: a bookmark every second, and at
	// least three within that timeout, so one late bookmark on a loaded node is not a failover.
	sv := Serving{Info: ri, BookmarkEvery: min(time.Second, p.cfg.LeaderTimeout/3), Alive: func() bool { return p.Leading() && p.online() }}
	if ri.Verb == wire.VerbWatch {
		ri.AllowWatchBookmarks = true // followers tell a dead leader by its silence
		if p.cfg.OnPeerWatch != nil {
			p.cfg.OnPeerWatch(1)
			defer p.cfg.OnPeerWatch(-1)
		}
		st.ServeWatch(w, r, sv)
		return
	}
	st.ServeList(w, sv)
}

// peerClient is a follower's connection to leaders: HTTP/2 over mTLS with the node's certificate,
// the leader verified against the cluster CA.
type peerClient struct {
	creds   wire.Credentials
	timeout time.Duration
	// from is the address a follower dials its leader from (nil: the system's choice).
	from net.Addr

	mu sync.Mutex
	t  *http.Transport
}

func newPeerClient(creds wire.Credentials, timeout time.Duration, self string) *peerClient {
	return &peerClient{creds: creds, timeout: timeout, from: dialFrom(self)}
}

// dialFrom is the address a follower whose pool address is self dials its leader from: that
// address's IP when it is a loopback one (hubs of one machine, as in tests and benchmarks: the
// system would dial from 127.0.0.1 for all of them, and the leader, which bounds each address's
// connections, would take a pool of 100 for one host and refuse most), else the system's choice.
func dialFrom(self string) net.Addr {
	host, _, err := net.SplitHostPort(self)
	if err != nil {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() || ip.Equal(net.IPv4(127, 0, 0, 1)) || ip.Equal(net.IPv6loopback) {
		return nil
	}
	return &net.TCPAddr{IP: ip}
}

func (c *peerClient) transport() (*http.Transport, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t != nil {
		return c.t, nil
	}
	var ca *x509.CertPool
	if c.creds != nil {
		ca = c.creds.CAPool()
	}
	if ca == nil {
		return nil, errors.New("pool: cluster CA not loaded")
	}
	c.t = &http.Transport{
		DialContext:         (&net.Dialer{Timeout: c.timeout, KeepAlive: 15 * time.Second, LocalAddr: c.from}).DialContext,
		TLSClientConfig:     &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: ca, GetClientCertificate: c.creds.GetClientCertificate},
		TLSHandshakeTimeout: c.timeout,
		ForceAttemptHTTP2:   true,
		DisableCompression:  true,
		IdleConnTimeout:     90 * time.Second,
		HTTP2:               &http.HTTP2Config{SendPingTimeout: c.timeout, PingTimeout: c.timeout},
	}
	return c.t, nil
}

// get sends a GET to a leader at addr, asking for protobuf. The leader's certificate must be the
// serving certificate of node (CN system:node:<node>), besides naming addr and coming from the
// cluster CA.
func (c *peerClient) get(ctx context.Context, node, addr, path string) (*http.Response, error) {
	t, err := c.transport()
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", wire.MediaProtobuf+", "+wire.MediaJSON)
	req.Header.Set("User-Agent", "nodehub/pool")
	resp, err := t.RoundTrip(req)
	if err != nil {
		t.CloseIdleConnections()
		return nil, err
	}
	if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 || resp.TLS.PeerCertificates[0].Subject.CommonName != "system:node:"+node {
		resp.Body.Close()
		return nil, fmt.Errorf("pool: the leader at %s is not node %s", addr, node)
	}
	return resp, nil
}
