package harness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CoreDNSBinary builds (once per go.sum) CoreDNS from test/e2e/coredns and returns its path.
func CoreDNSBinary() (string, error) {
	cmd := exec.Command("sh", filepath.Join(RepoRoot(), "test", "e2e", "coredns", "build.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("build coredns: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "coredns"), nil
}

// FreeLowPort returns a loopback port below 32768 (under the kernel's ephemeral range) that is
// free for both TCP and UDP right now, as a DNS server needs.
func FreeLowPort() (int, error) {
	for i := 0; i < 100; i++ {
		port := 20000 + rand.IntN(12000)
		addr := "127.0.0.1:" + strconv.Itoa(port)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		pc, err := net.ListenPacket("udp", addr)
		ln.Close()
		if err != nil {
			continue
		}
		pc.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free loopback port below 32768 for TCP and UDP after 100 tries")
}

// CoreDNSOptions configure StartCoreDNS.
type CoreDNSOptions struct {
	// Bin is the coredns binary (CoreDNSBinary).
	Bin string
	// Dir holds the Corefile, the kubeconfig and the log.
	Dir string
	// Server is the API server CoreDNS's kubernetes plugin talks to (nodehub's secure port), with
	// CAFile its CA and Token its ServiceAccount token, as in a pod.
	Server, CAFile, Token string
}

// CoreDNS is a CoreDNS process serving cluster.local on a loopback port with its kubernetes plugin.
type CoreDNS struct {
	*Proc
	// Addr is the DNS server's address (UDP and TCP).
	Addr string
	// Started is when the process was last started.
	Started time.Time
}

// StartCoreDNS writes a kubeconfig with the token and a Corefile and starts CoreDNS.
func StartCoreDNS(o CoreDNSOptions) (*CoreDNS, error) {
	port, err := FreeLowPort()
	if err != nil {
		return nil, err
	}
	kc := filepath.Join(o.Dir, "coredns.kubeconfig")
	if err := os.WriteFile(kc, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: hub, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: coredns, user: {token: %q}}]
contexts: [{name: hub, context: {cluster: hub, user: coredns}}]
current-context: hub
`, o.Server, o.CAFile, o.Token)), 0o600); err != nil {
		return nil, err
	}
	corefile := filepath.Join(o.Dir, "Corefile")
	if err := os.WriteFile(corefile, []byte(fmt.Sprintf(`cluster.local:%d {
	bind 127.0.0.1
	errors
	kubernetes cluster.local {
		kubeconfig %s
	}
}
`, port, kc)), 0o600); err != nil {
		return nil, err
	}
	d := &CoreDNS{Addr: "127.0.0.1:" + strconv.Itoa(port), Proc: &Proc{Name: "coredns", Path: o.Bin,
		Args: []string{"-conf", corefile}, LogFile: filepath.Join(o.Dir, "coredns.log")}}
	return d, d.Start()
}

// Start starts CoreDNS (again, after Stop) and records when.
func (d *CoreDNS) Start() error {
	d.Started = time.Now()
	return d.Proc.Start()
}

// Lookup resolves name (a fully qualified name, ending in a dot) to its addresses, asking this
// CoreDNS only.
func (d *CoreDNS) Lookup(ctx context.Context, name string) ([]string, error) {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, network, d.Addr)
	}}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return r.LookupHost(ctx, name)
}
