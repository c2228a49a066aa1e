package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// FlannelBinary builds (once per go.sum) flanneld from test/e2e/flannel and returns its path.
func FlannelBinary() (string, error) {
	cmd := exec.Command("sh", filepath.Join(RepoRoot(), "test", "e2e", "flannel", "build.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("build flannel: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "flanneld"), nil
}

// FlannelOptions says how to run flanneld with its Kubernetes subnet manager.
type FlannelOptions struct {
	// Bin is flanneld (FlannelBinary); Wrap, when set, runs it (e.g. nsenter into a node's
	// network namespace: a script taking the command as its arguments).
	Bin, Wrap string
	// Dir holds the kubeconfig, net-conf.json, subnet.env and the log.
	Dir string
	// Node is the Node flannel runs for (its NODE_NAME); Iface the link to the other nodes.
	Node, Iface string
	// Server is the API server (nodehub's secure port), CAFile its CA and Token flannel's
	// ServiceAccount token, as in its pod.
	Server, CAFile, Token string
	// NetConf is net-conf.json (the kube-flannel ConfigMap's).
	NetConf string
}

// Flannel is a flanneld process.
type Flannel struct {
	*Proc
	// SubnetFile is the subnet.env flannel writes for its CNI plugin.
	SubnetFile string
	// Started is when the process was last started.
	Started time.Time
}

// StartFlannel writes flannel's kubeconfig and net-conf.json and starts it.
func StartFlannel(o FlannelOptions) (*Flannel, error) {
	kc := filepath.Join(o.Dir, "flannel.kubeconfig")
	if err := os.WriteFile(kc, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: hub, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: flannel, user: {token: %q}}]
contexts: [{name: hub, context: {cluster: hub, user: flannel}}]
current-context: hub
`, o.Server, o.CAFile, o.Token)), 0o600); err != nil {
		return nil, err
	}
	conf := filepath.Join(o.Dir, "net-conf.json")
	if err := os.WriteFile(conf, []byte(o.NetConf), 0o644); err != nil {
		return nil, err
	}
	f := &Flannel{SubnetFile: filepath.Join(o.Dir, "subnet.env")}
	args := []string{"--kube-subnet-mgr", "--kubeconfig-file=" + kc, "--net-config-path=" + conf,
		"--iface=" + o.Iface, "--subnet-file=" + f.SubnetFile, "--v=2"}
	f.Proc = &Proc{Name: "flanneld", Path: o.Bin, Args: args, Env: []string{"NODE_NAME=" + o.Node},
		LogFile: filepath.Join(o.Dir, "flanneld.log")}
	if o.Wrap != "" {
		f.Proc.Path, f.Proc.Args = o.Wrap, append([]string{o.Bin}, args...)
	}
	return f, f.Start()
}

// Start starts flannel (again, after Stop) and records when.
func (f *Flannel) Start() error {
	f.Started = time.Now()
	return f.Proc.Start()
}
