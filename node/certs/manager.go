package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"nodehub/durable"
)

// ManagerConfig configures a Manager.
type ManagerConfig struct {
	// Servers are the cloud servers (https://host:port), tried in order.
	Servers  []string
	NodeName string
	// Organizations are added to system:nodes in the client certificate (--hub-cert-organizations).
	Organizations []string
	// Dir is <--root-dir>/pki: the CA and the certificates live there.
	Dir string
	// Token is the join token (--join-token); Discovery says how the CA is checked with it.
	Token     string
	Discovery Discovery
	// BootstrapKubeconfig (--bootstrap-file) is used instead of the token when set: its CA and its
	// token or client certificate make the first CSR.
	BootstrapKubeconfig string
	// IssueTimeout bounds the wait for one CSR to be issued (default 15 minutes).
	IssueTimeout time.Duration
	Log          *slog.Logger
	// OnBytes, if set, is told the body bytes of every exchange with the cloud (cluster-info,
	// CSRs).
	OnBytes OnBytes
}

// Manager owns the node's client certificate: it bootstraps one with a join token (or a
// bootstrap kubeconfig), stores it in Dir, renews it by a new CSR at 70–90% of its lifetime and
// bootstraps again when it expired. It implements the Credentials the remote backends use; new
// connections use a new certificate at once, and Generation tells the backends to drop
// connections made with the old one.
type Manager struct {
	cfg ManagerConfig
	log *slog.Logger

	pool atomic.Pointer[x509.CertPool]
	cert atomic.Pointer[tls.Certificate]
	gen  atomic.Uint64
	got  time.Time // when cert was obtained; Run's alone
	// unstored, when set, writes the certificate in use, whose store failed; Run's alone.
	unstored unstored
	// storedPins are the pins of the CA an earlier bootstrap verified (ca.crt in Dir): a new
	// bootstrap trusts that CA without --discovery-token-ca-cert-hash.
	storedPins []string

	mu      sync.Mutex
	token   string
	err     error
	tokenCh chan struct{} // a new token was given
	loaded  chan struct{} // closed once a certificate is loaded
	once    sync.Once
}

// NewManager loads what Dir already holds (a valid certificate means no bootstrap); Run does
// the rest.
func NewManager(cfg ManagerConfig) *Manager {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.IssueTimeout <= 0 {
		cfg.IssueTimeout = 15 * time.Minute
	}
	m := &Manager{cfg: cfg, log: cfg.Log, token: cfg.Token, tokenCh: make(chan struct{}, 1), loaded: make(chan struct{}),
		err: fmt.Errorf("%w: bootstrapping the node's certificate", ErrNotLoaded)}
	if data, err := os.ReadFile(filepath.Join(cfg.Dir, CAName)); err == nil {
		if p := x509.NewCertPool(); p.AppendCertsFromPEM(data) {
			m.pool.Store(p)
			m.storedPins = pinsOf(data)
		}
	}
	if m.pool.Load() != nil {
		path := filepath.Join(cfg.Dir, ClientPEMName)
		if c, err := loadPair(path, time.Now()); err == nil {
			m.setCert(c, fileTime(path))
		}
	}
	return m
}

// CAPool is the cluster CA, nil until bootstrap verified it.
func (m *Manager) CAPool() *x509.CertPool { return m.pool.Load() }

// GetClientCertificate is a tls.Config hook: the current client certificate.
func (m *Manager) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	if c := m.cert.Load(); c != nil {
		return c, nil
	}
	return nil, m.Err()
}

// Generation changes each time the client certificate is replaced.
func (m *Manager) Generation() uint64 { return m.gen.Load() }

// Err is nil while a valid certificate is loaded, else says why there is none.
func (m *Manager) Err() error {
	if c := m.cert.Load(); c != nil && m.pool.Load() != nil && time.Now().Before(c.Leaf.NotAfter) {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// SetToken replaces the join token (POST /v1/token): a node whose certificate and token both
// expired while offline bootstraps again with it.
func (m *Manager) SetToken(tok string) error {
	if _, _, err := ParseToken(tok); err != nil {
		return err
	}
	m.mu.Lock()
	m.token = tok
	m.mu.Unlock()
	select {
	case m.tokenCh <- struct{}{}:
	default:
	}
	return nil
}

func (m *Manager) setCert(c *tls.Certificate, got time.Time) {
	m.got = got
	m.cert.Store(c)
	m.gen.Add(1)
	m.once.Do(func() { close(m.loaded) })
}

func (m *Manager) setErr(err error) {
	m.mu.Lock()
	m.err = err
	m.mu.Unlock()
}

// Run keeps a valid certificate until ctx ends. It returns early only for a configuration
// error that retrying cannot fix (the CA matches no pin on the first bootstrap).
func (m *Manager) Run(ctx context.Context) error {
	backoff := time.Second
	for ctx.Err() == nil {
		c := m.cert.Load()
		var err error
		switch {
		case c == nil || !time.Now().Before(c.Leaf.NotAfter):
			err = m.bootstrap(ctx)
			m.mu.Lock()
			flagToken := m.token == m.cfg.Token
			m.mu.Unlock()
			if errors.Is(err, ErrCAHash) && c == nil && flagToken {
				m.setErr(err)
				return err
			}
		case m.unstored != nil:
			at := renewAt(m.got, c.Leaf.NotBefore, c.Leaf.NotAfter, 0)
			stored, ok := m.unstored.retry(ctx, m.log, "client certificate", at)
			if !ok {
				return nil
			}
			if stored {
				m.unstored = nil
			}
			continue
		default:
			at := renewAt(m.got, c.Leaf.NotBefore, c.Leaf.NotAfter, rand.Float64())
			m.log.Info("certs: client certificate valid", "notAfter", c.Leaf.NotAfter.UTC().Format(time.RFC3339), "renewAt", at.UTC().Format(time.RFC3339))
			if !sleep(ctx, time.Until(at), nil) {
				return nil
			}
			err = m.renew(ctx, c)
		}
		if err == nil {
			backoff = time.Second
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		if m.Err() != nil {
			m.setErr(fmt.Errorf("%w: %v", ErrNotLoaded, err))
		}
		wait := jittered(backoff)
		m.log.Warn("certs: node client certificate", "err", err, "retryIn", wait.Round(time.Millisecond))
		if !sleep(ctx, wait, m.tokenCh) {
			return nil
		}
		backoff = nextBackoff(backoff, err)
	}
	return nil
}

// nextBackoff doubles the wait between attempts up to a minute, or up to 10 minutes after a
// denial (a fleet of denied gateways must not file a CSR each per minute).
func nextBackoff(d time.Duration, err error) time.Duration {
	limit := time.Minute
	if errors.Is(err, ErrDenied) {
		limit = 10 * time.Minute
	}
	return min(d*2, limit)
}

// jittered spreads d by ±20%, so gateways that failed together do not retry together.
func jittered(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// sleep waits d, or until kick fires; false when ctx ended.
func sleep(ctx context.Context, d time.Duration, kick <-chan struct{}) bool {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-kick:
	}
	return true
}

func (m *Manager) clientSpec() CSRSpec {
	signer := SignerClient
	if len(m.cfg.Organizations) > 0 {
		signer = SignerAPIClient
	}
	return CSRSpec{Signer: signer, CN: "system:node:" + m.cfg.NodeName,
		Orgs: append([]string{"system:nodes"}, m.cfg.Organizations...), Usages: []string{"digital signature", "client auth"}}
}

// bootstrap obtains a first certificate with the join token or the bootstrap kubeconfig.
func (m *Manager) bootstrap(ctx context.Context) error {
	m.mu.Lock()
	token := m.token
	m.mu.Unlock()
	if m.cfg.BootstrapKubeconfig != "" && token == m.cfg.Token {
		return m.bootstrapWithKubeconfig(ctx)
	}
	if token == "" {
		return errors.New("certs: no valid certificate and no join token (give --join-token, or POST one to /v1/token)")
	}
	return m.bootstrapWithToken(ctx, token)
}

// bootstrapWithKubeconfig asks for a certificate with the bootstrap kubeconfig's credentials, of
// its server first and then of the others, until one issues it.
func (m *Manager) bootstrapWithKubeconfig(ctx context.Context) error {
	kc, err := LoadKubeconfig(m.cfg.BootstrapKubeconfig)
	if err != nil {
		return err
	}
	tlsCfg, err := m.bootstrapTLS(kc)
	if err != nil {
		return err
	}
	servers := m.cfg.Servers
	if kc.Server != "" {
		servers = append([]string{kc.Server}, servers...)
	}
	var errs []error
	for _, srv := range servers {
		err := m.issue(ctx, srv, kc.CA, tlsCfg.RootCAs, newAPIClient(srv, tlsCfg, kc.Token, 30*time.Second, m.cfg.OnBytes))
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// bootstrapTLS is the TLS configuration of the bootstrap kubeconfig: its CA, and its client
// certificate when it has no token.
func (m *Manager) bootstrapTLS(kc *Kubeconfig) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(kc.CA) {
		return nil, fmt.Errorf("certs: %s: no CA", m.cfg.BootstrapKubeconfig)
	}
	tlsCfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if kc.Token != "" {
		return tlsCfg, nil
	}
	var pair tls.Certificate
	var err error
	if len(kc.CertData) > 0 {
		pair, err = tls.X509KeyPair(kc.CertData, kc.KeyData)
	} else {
		pair, err = tls.LoadX509KeyPair(kc.CertFile, kc.KeyFile)
	}
	if err != nil {
		return nil, fmt.Errorf("certs: %s: %w", m.cfg.BootstrapKubeconfig, err)
	}
	tlsCfg.Certificates = []tls.Certificate{pair}
	return tlsCfg, nil
}

// bootstrapWithToken asks each server in turn for a certificate with the join token, over a
// connection verified with the CA its cluster-info vouches for; a CA no pin matches ends it.
func (m *Manager) bootstrapWithToken(ctx context.Context, token string) error {
	d := m.cfg.Discovery
	d.count = m.cfg.OnBytes
	d.Token = token
	d.CAHashes = append(append([]string(nil), d.CAHashes...), m.storedPins...)
	var errs []error
	for _, srv := range m.cfg.Servers {
		caPEM, err := d.FetchCA(ctx, srv)
		if err != nil {
			if errors.Is(err, ErrCAHash) {
				return err
			}
			errs = append(errs, fmt.Errorf("%s: %w", srv, err))
			continue
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(caPEM)
		c := newAPIClient(srv, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, token, 30*time.Second, m.cfg.OnBytes)
		if err := m.issue(ctx, srv, caPEM, pool, c); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", srv, err))
			continue
		}
		return nil
	}
	return errors.Join(errs...)
}

// renew replaces a valid certificate by a new CSR made with it.
func (m *Manager) renew(ctx context.Context, cur *tls.Certificate) error {
	pool := m.pool.Load()
	var errs []error
	for _, srv := range m.cfg.Servers {
		c := newAPIClient(srv, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{*cur}, MinVersion: tls.VersionTLS12}, "", 30*time.Second, m.cfg.OnBytes)
		if err := m.issue(ctx, srv, nil, pool, c); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", srv, err))
			continue
		}
		return nil
	}
	return errors.Join(errs...)
}

// issue asks srv for a client certificate and, once issued, stores it (and the CA, when given)
// and starts using it.
func (m *Manager) issue(ctx context.Context, srv string, caPEM []byte, pool *x509.CertPool, c *apiClient) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.IssueTimeout)
	defer cancel()
	pemData, err := requestCertificate(ctx, c, m.clientSpec(), func(name string) {
		m.log.Info("certs: client CSR created", "csr", name, "server", srv)
	})
	if err != nil {
		return err
	}
	pair, err := parsePair(pemData, time.Now())
	if err != nil {
		return err
	}
	m.adopt(pair, caPEM, pool, pemData)
	return nil
}

// adopt starts using an issued certificate (and the CA it was verified with, when given), then
// stores both; a failed store keeps the certificate in use and leaves the write to Run to retry.
func (m *Manager) adopt(pair *tls.Certificate, caPEM []byte, pool *x509.CertPool, pemData []byte) {
	if caPEM != nil {
		m.pool.Store(pool)
		m.storedPins = pinsOf(caPEM)
	}
	m.setCert(pair, time.Now())
	m.setErr(nil)
	m.log.Info("certs: client certificate issued", "subject", pair.Leaf.Subject.String(), "notAfter", pair.Leaf.NotAfter.UTC().Format(time.RFC3339))
	store := unstored(func() error {
		if caPEM != nil {
			if err := durable.WriteFile(filepath.Join(m.cfg.Dir, CAName), caPEM, 0o644); err != nil {
				return fmt.Errorf("certs: store CA: %w", err)
			}
		}
		if err := durable.WriteFile(filepath.Join(m.cfg.Dir, ClientPEMName), pemData, 0o600); err != nil {
			return fmt.Errorf("certs: store client certificate: %w", err)
		}
		return nil
	})
	m.unstored = nil
	if err := store(); err != nil {
		m.log.Warn("certs: issued client certificate not stored; used from memory, the write is retried", "err", err)
		m.unstored = store
	}
}

// pinsOf returns the pins (hex, as ParseCAHash gives them) of the certificates in a PEM bundle.
func pinsOf(data []byte) []string {
	var pins []string
	for {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			return pins
		}
		if c, err := x509.ParseCertificate(b.Bytes); err == nil {
			pins = append(pins, strings.TrimPrefix(CAHash(c), "sha256:"))
		}
	}
}
