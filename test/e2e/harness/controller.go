package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ControllerOptions choose what kube-controller-manager runs.
type ControllerOptions struct {
	// Controllers is the --controllers list; empty means the ones the identity and node tests need:
	// CSR approving and signing, bootstrap-token signing and cleanup, service accounts, daemonsets.
	Controllers []string
	// SigningDuration is --cluster-signing-duration (how long issued certificates live); 0 keeps
	// the default (a year).
	SigningDuration time.Duration
	// Args are appended as they are.
	Args []string
}

// DefaultControllers is what ControllerOptions.Controllers means when empty.
var DefaultControllers = []string{"csrapproving", "csrsigning", "csrcleaner", "bootstrapsigner", "tokencleaner",
	"serviceaccount", "serviceaccount-token", "daemonset"}

// StartControllerManager runs kube-controller-manager against the first apiserver, signing
// certificates with the cluster CA. It is stopped with the returned Proc (and with the test).
func (c *Cluster) StartControllerManager(ctx context.Context, o ControllerOptions) (*Proc, error) {
	ctrls := o.Controllers
	if len(ctrls) == 0 {
		ctrls = DefaultControllers
	}
	kubeconfig := filepath.Join(c.Dir, "controller-manager.kubeconfig")
	if err := c.WriteKubeconfig(kubeconfig, c.APIServers[0].URL, c.AdminCert, c.AdminKey); err != nil {
		return nil, err
	}
	args := []string{
		"--kubeconfig", kubeconfig,
		"--controllers", strings.Join(ctrls, ","),
		"--cluster-signing-cert-file", c.PKI.CAFile,
		"--cluster-signing-key-file", filepath.Join(c.PKI.Dir, "ca.key"),
		"--root-ca-file", c.PKI.CAFile,
		"--service-account-private-key-file", filepath.Join(c.PKI.Dir, "sa.key"),
		"--use-service-account-credentials=false",
		"--leader-elect=false",
		"--secure-port=0",
		"--concurrent-daemonset-syncs=2",
		"--v=1",
	}
	if o.SigningDuration > 0 {
		args = append(args, "--cluster-signing-duration", o.SigningDuration.String())
	}
	args = append(args, o.Args...)
	p := &Proc{Name: "kube-controller-manager", Path: filepath.Join(c.BinDir, "kube-controller-manager"),
		LogFile: filepath.Join(c.Dir, "controller-manager.log"), Args: args}
	if err := p.Start(); err != nil {
		return nil, err
	}
	// It has no port to poll; give it a moment and make sure it did not exit on its flags.
	select {
	case <-ctx.Done():
		p.Stop()
		return nil, ctx.Err()
	case <-time.After(time.Second):
	}
	if !p.Running() {
		return nil, fmt.Errorf("kube-controller-manager exited:\n%s", tail(p.Log(), 3000))
	}
	return p, nil
}

// WriteKubeconfig writes a kubeconfig for server with a client certificate and the cluster CA.
func (c *Cluster) WriteKubeconfig(path, server, cert, key string) error {
	s := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: user
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: e2e
  context:
    cluster: e2e
    user: user
current-context: e2e
`, server, c.PKI.CAFile, cert, key)
	return os.WriteFile(path, []byte(s), 0o600)
}
