package hub

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"nodehub/hub/remote"
	"nodehub/node/certs"
	"nodehub/pool"
)

// What main needs besides Config to start a hub: the checks of the values that go into Config
// that are the hub's (servers, balancing), and the node's credentials and serving certificate it
// hands to Config (with their parts, which the hub runs). main never reaches hub's parts
// (hub/remote...); the node's features it configures (node/certs, node/dummyif) it uses directly.

// Load-balancing modes (Config.LBMode).
const (
	RoundRobin = remote.RoundRobin
	Priority   = remote.Priority
)

// ParseServerAddr checks one cloud server address of Config.Servers ("host:port" means https).
func ParseServerAddr(addr string) (*url.URL, error) { return remote.ParseServerAddr(addr) }

// NodeIdentity says where the node's credentials come from (the bootstrap flags).
type NodeIdentity struct {
	Mode     string // certs.ModeToken or certs.ModeKubeletCertificate
	Servers  []string
	NodeName string
	// PKIDir is <root-dir>/pki: the hub's certificates.
	PKIDir string
	// Token bootstrap: a join token with its CA pins, or a bootstrap kubeconfig.
	JoinToken          string
	CAHashes           []string
	SkipCAVerification bool
	BootstrapFile      string
	// Organizations are added to system:nodes in the client certificate.
	Organizations []string
	// Files: kubelet's kubeconfig, or the files named directly (they override the mode).
	KubeletKubeconfig             string
	ClientCert, ClientKey, CAFile string
}

// Bootstraps reports whether the hub obtains the node's certificate itself (token mode with a
// token, a bootstrap file, or a certificate an earlier bootstrap left in PKIDir) rather than
// reading kubelet's or the named files.
func (id NodeIdentity) Bootstraps() bool {
	if id.Mode != certs.ModeToken || id.ClientCert != "" || id.CAFile != "" {
		return false
	}
	if id.JoinToken != "" || id.BootstrapFile != "" {
		return true
	}
	_, err := os.Stat(filepath.Join(id.PKIDir, certs.ClientPEMName))
	return err == nil
}

// Part is a part of the node main builds before the hub (the node's credentials, the serving
// certificate) and hands to Config.Parts: the hub runs it with its own parts, until it stops; an
// error it returns stops the hub.
type Part struct {
	Name string
	Run  func(ctx context.Context) error
	// bytes, if set, are the part's exchanges with the cloud: the hub counts them as purpose
	// "certs" of nodehub_cloud_bytes_total once it runs the part.
	bytes *partBytes
}

// partBytes counts the body bytes a part exchanges with the cloud into the hub's metric, once
// the hub attached it; what came before (nothing, as the parts talk to the cloud in Run) is kept
// until then.
type partBytes struct {
	mu      sync.Mutex
	count   func(direction string, n int)
	pending map[string]int
}

func (b *partBytes) add(direction string, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.count != nil {
		b.count(direction, n)
		return
	}
	if b.pending == nil {
		b.pending = map[string]int{}
	}
	b.pending[direction] += n
}

// attach counts the part's bytes as purpose in m from now on (nil b or m: nothing).
func (b *partBytes) attach(m *hubMetrics, purpose string) {
	if b == nil || m == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.count = func(direction string, n int) { m.purposeFunc(purpose, direction)(n) }
	for d, n := range b.pending {
		b.count(d, n)
	}
	b.pending = nil
}

// NodeCredentials returns the node's credentials for Config.Credentials and, when the hub
// bootstraps them, Config.SetToken and the part that obtains and renews the certificate (else
// nil and nil). That part's error (a wrong CA pin) stops the hub.
func NodeCredentials(id NodeIdentity, log *slog.Logger) (Credentials, func(string) error, *Part) {
	if id.Bootstraps() {
		b := &partBytes{}
		mgr := certs.NewManager(certs.ManagerConfig{
			Servers: id.Servers, NodeName: id.NodeName, Organizations: id.Organizations, Dir: id.PKIDir,
			Token: id.JoinToken, Discovery: certs.Discovery{CAHashes: id.CAHashes, SkipCAVerification: id.SkipCAVerification},
			BootstrapKubeconfig: id.BootstrapFile, Log: log, OnBytes: b.add,
		})
		return mgr, mgr.SetToken, &Part{Name: "node credentials", Run: mgr.Run, bytes: b}
	}
	if id.Mode == certs.ModeToken && id.ClientCert == "" && id.CAFile == "" {
		log.Info("no --join-token or --bootstrap-file and no bootstrapped certificate: using kubelet's credentials", "kubeconfig", id.KubeletKubeconfig)
	}
	src := certs.NewSource(certs.KubeletFiles(id.KubeletKubeconfig, id.ClientCert, id.ClientKey, id.CAFile))
	if err := src.Err(); err != nil {
		log.Warn("node credentials not loaded yet; retrying in the background", "err", err)
	}
	return src, nil, nil
}

// SecureNames returns where the secure port listens (port 0: nowhere) and which IPs the hub's
// serving certificate names (Config.SecureAddrs, and ServingCertificate's ips). Pods reach the
// secure port at the proxy's bind address, the hub's link address and the address the filters
// give them (masterHost), each once; an unspecified bind address is all of them. A pool leader
// (poolMode not pool.ModeOff) serves the other hubs with the same certificate at its pool
// address (poolBind), also when the secure port is off.
func SecureNames(bindProxy string, port int, masterHost string, dummy DummyIf, poolMode, poolBind string) (addrs []string, ips []net.IP) {
	if port > 0 {
		hosts := []string{bindProxy}
		if ip := net.ParseIP(bindProxy); ip == nil || !ip.IsUnspecified() {
			hosts = append(hosts, Config{DummyIf: dummy}.ExtraHosts()...)
			hosts = append(hosts, masterHost)
		}
		for _, h := range hosts {
			addr := net.JoinHostPort(h, strconv.Itoa(port))
			if slices.Contains(addrs, addr) {
				continue
			}
			addrs = append(addrs, addr)
			ips = append(ips, net.ParseIP(h))
		}
	}
	if ip := net.ParseIP(poolBind); poolMode != pool.ModeOff && ip != nil && !ip.IsUnspecified() && !slices.ContainsFunc(ips, ip.Equal) {
		ips = append(ips, ip)
	}
	return addrs, ips
}

// ServingCertificate returns Config.ServingCert, the hub's serving certificate, and the part
// that obtains it (a kubernetes.io/kubelet-serving CSR for ips and the kubernetes service names,
// stored in pkiDir) and renews it.
func ServingCertificate(servers []string, nodeName, pkiDir string, ips []net.IP, creds Credentials, log *slog.Logger) (func(*tls.ClientHelloInfo) (*tls.Certificate, error), Part) {
	b := &partBytes{}
	s := certs.NewServing(certs.ServingConfig{Servers: servers, NodeName: nodeName, Dir: pkiDir, IPs: ips, Creds: creds, Log: log, OnBytes: b.add})
	return s.GetCertificate, Part{Name: "serving certificate", Run: func(ctx context.Context) error { s.Run(ctx); return nil }, bytes: b}
}
