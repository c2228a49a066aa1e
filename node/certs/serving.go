package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"nodehub/durable"
	"nodehub/wire"
)

// ServingConfig configures a Serving.
type ServingConfig struct {
	Servers  []string
	NodeName string
	Dir      string // <--root-dir>/pki
	// IPs and DNS are the SANs asked for besides the kubernetes service names and the
	// default/kubernetes ClusterIP, which Serving reads from the cloud.
	IPs []net.IP
	DNS []string
	// IssueTimeout bounds the wait for one CSR (default 1 hour: a kubelet-serving CSR is approved
	// by an approver the cluster runs, or by an admin).
	IssueTimeout time.Duration
	Creds        wire.Credentials // the node's: a Manager, or a Source of kubelet's files
	Log          *slog.Logger
	// OnBytes, if set, is told the body bytes of every exchange with the cloud (the kubernetes
	// Service's address, CSRs).
	OnBytes OnBytes
}

// KubernetesServiceNames are the names pods use for the apiserver; the serving certificate
// carries them all.
var KubernetesServiceNames = []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}

// Serving owns the hub's serving certificate (signer kubernetes.io/kubelet-serving), stored in
// Dir and renewed like the client certificate. GetCertificate is a tls.Config hook.
type Serving struct {
	cfg  ServingConfig
	log  *slog.Logger
	cert atomic.Pointer[tls.Certificate]
	got  time.Time // when cert was obtained; Run's alone
	// unstored, when set, writes the certificate in use, whose store failed; Run's alone.
	unstored unstored
}

// NewServing loads the certificate Dir already holds.
func NewServing(cfg ServingConfig) *Serving {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.IssueTimeout <= 0 {
		cfg.IssueTimeout = time.Hour
	}
	s := &Serving{cfg: cfg, log: cfg.Log}
	path := filepath.Join(cfg.Dir, ServingPEMName)
	if c, err := loadPair(path, time.Now()); err == nil {
		s.cert.Store(c)
		s.got = fileTime(path)
	}
	return s
}

// ErrNoServingCert is returned by GetCertificate until a serving certificate is issued.
var ErrNoServingCert = errors.New("certs: no serving certificate yet")

// GetCertificate returns the current serving certificate.
func (s *Serving) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := s.cert.Load(); c != nil {
		return c, nil
	}
	return nil, ErrNoServingCert
}

// Run keeps a valid serving certificate until ctx ends.
func (s *Serving) Run(ctx context.Context) {
	backoff := time.Second
	for ctx.Err() == nil {
		if !s.credsReady() {
			if !sleep(ctx, time.Second, nil) {
				return
			}
			continue
		}
		if c := s.cert.Load(); s.unstored != nil && c != nil {
			stored, ok := s.unstored.retry(ctx, s.log, "serving certificate", renewAt(s.got, c.Leaf.NotBefore, c.Leaf.NotAfter, 0))
			if !ok {
				return
			}
			if stored {
				s.unstored = nil
			}
			continue
		}
		ips, dns := s.wanted(ctx)
		c := s.cert.Load()
		if c != nil && time.Now().Before(c.Leaf.NotAfter) && covers(c.Leaf, ips, dns) {
			at := renewAt(s.got, c.Leaf.NotBefore, c.Leaf.NotAfter, rand.Float64())
			s.log.Info("certs: serving certificate valid", "notAfter", c.Leaf.NotAfter.UTC().Format(time.RFC3339), "renewAt", at.UTC().Format(time.RFC3339))
			if !sleep(ctx, time.Until(at), nil) {
				return
			}
		}
		if err := s.issue(ctx, ips, dns); err != nil {
			if ctx.Err() != nil {
				return
			}
			wait := jittered(backoff)
			s.log.Warn("certs: serving certificate", "err", err, "retryIn", wait.Round(time.Millisecond))
			if !sleep(ctx, wait, nil) {
				return
			}
			backoff = max(nextBackoff(backoff, err), min(backoff*2, 5*time.Minute))
			continue
		}
		backoff = time.Second
	}
}

func (s *Serving) credsReady() bool {
	if s.cfg.Creds.CAPool() == nil {
		return false
	}
	_, err := s.cfg.Creds.GetClientCertificate(nil)
	return err == nil
}

func (s *Serving) client(srv string) *apiClient {
	return newAPIClient(srv, &tls.Config{RootCAs: s.cfg.Creds.CAPool(), GetClientCertificate: s.cfg.Creds.GetClientCertificate, MinVersion: tls.VersionTLS12}, "", 30*time.Second, s.cfg.OnBytes)
}

// wanted is the SAN set: the configured addresses, the kubernetes names and the ClusterIP of
// default/kubernetes (when the cloud answers).
func (s *Serving) wanted(ctx context.Context) ([]net.IP, []string) {
	ips := slices.Clone(s.cfg.IPs)
	dns := append(slices.Clone(s.cfg.DNS), KubernetesServiceNames...)
	for _, srv := range s.cfg.Servers {
		var svc struct {
			Spec struct {
				ClusterIP  string   `json:"clusterIP"`
				ClusterIPs []string `json:"clusterIPs"`
			} `json:"spec"`
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := s.client(srv).do(cctx, http.MethodGet, "/api/v1/namespaces/default/services/kubernetes", nil, &svc)
		cancel()
		if err != nil {
			continue
		}
		for _, a := range append([]string{svc.Spec.ClusterIP}, svc.Spec.ClusterIPs...) {
			if ip := net.ParseIP(a); ip != nil && !slices.ContainsFunc(ips, ip.Equal) {
				ips = append(ips, ip)
			}
		}
		break
	}
	return ips, dns
}

// covers reports whether c names every wanted SAN.
func covers(c *x509.Certificate, ips []net.IP, dns []string) bool {
	for _, ip := range ips {
		if !slices.ContainsFunc(c.IPAddresses, ip.Equal) {
			return false
		}
	}
	for _, d := range dns {
		if !slices.Contains(c.DNSNames, d) {
			return false
		}
	}
	return true
}

func (s *Serving) issue(ctx context.Context, ips []net.IP, dns []string) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.IssueTimeout)
	defer cancel()
	spec := CSRSpec{Signer: SignerServing, CN: "system:node:" + s.cfg.NodeName, Orgs: []string{"system:nodes"},
		Usages: []string{"digital signature", "server auth"}, IPs: ips, DNS: dns}
	var errs []error
	for _, srv := range s.cfg.Servers {
		pemData, err := requestCertificate(ctx, s.client(srv), spec, func(name string) {
			s.log.Info("certs: serving CSR created; it needs approval (signer kubernetes.io/kubelet-serving)", "csr", name, "server", srv)
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", srv, err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		pair, err := parsePair(pemData, time.Now())
		if err != nil {
			return err
		}
		s.cert.Store(pair)
		s.got = time.Now()
		s.log.Info("certs: serving certificate issued", "notAfter", pair.Leaf.NotAfter.UTC().Format(time.RFC3339), "ips", ips, "dns", dns)
		// A failed store keeps the certificate in use (the secure port serves it from memory; the
		// pool port, which reads the file, waits for the retried write).
		s.unstored = func() error {
			if err := durable.WriteFile(filepath.Join(s.cfg.Dir, ServingPEMName), pemData, 0o600); err != nil {
				return fmt.Errorf("certs: store serving certificate: %w", err)
			}
			return nil
		}
		if err := s.unstored(); err != nil {
			s.log.Warn("certs: issued serving certificate not stored; used from memory, the write is retried", "err", err)
		} else {
			s.unstored = nil
		}
		return nil
	}
	return errors.Join(errs...)
}
