// Package certs provides the credentials nodehub presents to the cloud and to pods:
//   - Source: the node's client certificate and the cluster CA read from files (kubelet's), re-read
//     when the files change (kubelet rotates its certificate in place);
//   - Manager: a client certificate nodehub obtains itself — the CA learnt from cluster-info with a
//     join token (JWS and pin checked), a CSR for a key made on the device, renewal at 70–90% of
//     the lifetime, a new bootstrap when it expired;
//   - Serving: the secure port's certificate, from a kubelet-serving CSR, renewed the same way.
//
// Certificates live in <--root-dir>/pki as PEM (certificate, then key), 0600, replaced atomically.
package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Bootstrap modes (--bootstrap-mode).
const (
	ModeKubeletCertificate = "kubeletcertificate"
	ModeToken              = "token"
)

// Where kubelet keeps its credentials on a kubeadm-style node.
const (
	KubeletKubeconfig = "/etc/kubernetes/kubelet.conf"
	KubeletClientPEM  = "/var/lib/kubelet/pki/kubelet-client-current.pem"
	KubeletCAFile     = "/etc/kubernetes/pki/ca.crt"
)

// ErrNotLoaded is returned while the client certificate or CA cannot be read.
var ErrNotLoaded = errors.New("certs: credentials not loaded")

// reloadEvery bounds how often the files are looked at again.
const reloadEvery = 30 * time.Second

// Files says where the node's credentials are. CertFile and KeyFile may name the same PEM file.
// Data fields, when set, win over the files (embedded in a kubeconfig) and are never reloaded.
type Files struct {
	CertFile, KeyFile, CAFile string
	CertData, KeyData, CAData []byte
}

// KubeletFiles finds kubelet's credentials: the client certificate and CA its kubeconfig names
// (kubeconfig "" means KubeletKubeconfig), else the usual kubeadm paths. Explicit cert, key and
// ca paths override what was found.
func KubeletFiles(kubeconfig, cert, key, ca string) Files {
	f := Files{CertFile: KubeletClientPEM, KeyFile: KubeletClientPEM, CAFile: KubeletCAFile}
	if kubeconfig == "" {
		kubeconfig = KubeletKubeconfig
	}
	if kc, err := LoadKubeconfig(kubeconfig); err == nil {
		if len(kc.CA) > 0 {
			f.CAFile, f.CAData = "", kc.CA
		}
		if kc.CertFile != "" {
			f.CertFile, f.KeyFile = kc.CertFile, kc.KeyFile
		}
		if len(kc.CertData) > 0 {
			f.CertData, f.KeyData = kc.CertData, kc.KeyData
		}
	}
	if cert != "" {
		f.CertFile, f.CertData = cert, nil
		f.KeyFile = cert
	}
	if key != "" {
		f.KeyFile, f.KeyData = key, nil
	}
	if ca != "" {
		f.CAFile, f.CAData = ca, nil
	}
	return f
}

// Source serves the node's client certificate for TLS handshakes and the CA pool that verifies
// the cloud. Safe for concurrent use.
type Source struct {
	files Files
	now   func() time.Time

	mu      sync.Mutex
	cert    *tls.Certificate
	pool    *x509.CertPool
	certMod stamp // of the certificate and key files loaded last (zero: none yet)
	caMod   time.Time
	checked time.Time
	err     error
	gen     uint64
}

// stamp is the modification times of the certificate and key files.
type stamp struct{ cert, key time.Time }

// NewSource reads the credentials once; a failure is remembered (see Err) and retried later.
func NewSource(f Files) *Source {
	s := &Source{files: f, now: time.Now}
	s.mu.Lock()
	s.reloadLocked(true)
	s.mu.Unlock()
	return s
}

// Err is nil when a certificate and CA are loaded, else says what is missing.
func (s *Source) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reloadLocked(false)
	return s.err
}

// CAPool returns the cluster CA pool, or nil when it could not be read.
func (s *Source) CAPool() *x509.CertPool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reloadLocked(false)
	return s.pool
}

// Certificate returns the current client certificate.
func (s *Source) Certificate() (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reloadLocked(false)
	if s.cert == nil {
		return nil, s.err
	}
	return s.cert, nil
}

// GetClientCertificate is a tls.Config.GetClientCertificate hook.
func (s *Source) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return s.Certificate()
}

// reloadLocked re-reads the files when forced, when nothing is loaded yet, or when the
// certificate, key or CA file changed (looked at no more than once per reloadEvery). A change is
// recorded only once it loaded: a failed load (a rotation half written, the key written after the
// certificate) is tried again at the next look, and meanwhile the last good one is kept.
func (s *Source) reloadLocked(force bool) {
	now := s.now()
	if !force && now.Sub(s.checked) < reloadEvery {
		return
	}
	s.checked = now
	if err := s.reloadCALocked(); err != nil {
		s.err = err
		return
	}
	if len(s.files.CertData) > 0 {
		if s.cert == nil {
			s.setCert(tls.X509KeyPair(s.files.CertData, s.files.KeyData))
		}
		return
	}
	var st stamp
	for _, f := range []struct {
		path string
		t    *time.Time
	}{{s.files.CertFile, &st.cert}, {s.files.KeyFile, &st.key}} {
		if f.path == "" {
			continue
		}
		fi, err := os.Stat(f.path)
		if err != nil {
			if s.cert == nil {
				s.err = fmt.Errorf("%w: client certificate: %v", ErrNotLoaded, err)
			}
			return
		}
		*f.t = fi.ModTime()
	}
	if s.cert != nil && st == s.certMod {
		return
	}
	if s.setCert(tls.LoadX509KeyPair(s.files.CertFile, s.files.KeyFile)) {
		s.certMod = st
	}
}

// reloadCALocked loads the CA pool, and again when the CA file changed (a failed reload keeps
// the pool loaded before).
func (s *Source) reloadCALocked() error {
	var mod time.Time
	if len(s.files.CAData) == 0 && s.files.CAFile != "" {
		if fi, err := os.Stat(s.files.CAFile); err == nil {
			mod = fi.ModTime()
		}
	}
	if s.pool != nil && (mod.IsZero() || mod.Equal(s.caMod)) {
		return nil
	}
	pool, err := s.loadCA()
	if err != nil {
		if s.pool != nil {
			return nil
		}
		return err
	}
	s.pool, s.caMod = pool, mod
	return nil
}

// setCert keeps a loaded certificate and reports whether it did.
func (s *Source) setCert(c tls.Certificate, err error) bool {
	if err != nil {
		if s.cert == nil {
			s.err = fmt.Errorf("%w: client certificate: %v", ErrNotLoaded, err)
		}
		return false // a half-written rotation: keep serving the previous certificate
	}
	s.cert, s.err = &c, nil
	s.gen++
	return true
}

// Generation changes each time a new client certificate is loaded (kubelet rotated it).
func (s *Source) Generation() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reloadLocked(false)
	return s.gen
}

func (s *Source) loadCA() (*x509.CertPool, error) {
	data := s.files.CAData
	if len(data) == 0 {
		if s.files.CAFile == "" {
			return nil, fmt.Errorf("%w: no CA file", ErrNotLoaded)
		}
		var err error
		if data, err = os.ReadFile(s.files.CAFile); err != nil {
			return nil, fmt.Errorf("%w: CA: %v", ErrNotLoaded, err)
		}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%w: CA %s holds no PEM certificate", ErrNotLoaded, s.files.CAFile)
	}
	return pool, nil
}
