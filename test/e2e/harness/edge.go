package harness

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Edge is one more edge node of the cluster, for tests with several hubs: its Node object, its
// own client certificate, and a hub serving certificate for its pool address.
type Edge struct {
	Name              string
	IP                net.IP
	Dir               string // the hub's files: --root-dir is Dir/root
	Cert, Key         string
	ServingCertBundle string // Dir/root/pki/yurthub-server-current.pem (certificate then key)
}

// NewEdge creates node name in the cluster and issues its credentials: a client certificate
// (CN system:node:<name>, O system:nodes) and a serving certificate for ip, written where the hub
// reads it (<root-dir>/pki/yurthub-server-current.pem).
func (c *Cluster) NewEdge(ctx context.Context, name string, ip net.IP, dir string) (*Edge, error) {
	e := &Edge{Name: name, IP: ip, Dir: dir}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
	if _, err := c.Admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	var err error
	if e.Cert, e.Key, err = c.PKI.Issue("node-"+name, "system:node:"+name, []string{"system:nodes"}, nil, nil); err != nil {
		return nil, err
	}
	sc, sk, err := c.PKI.Issue("serving-"+name, "system:node:"+name, []string{"system:nodes"}, []net.IP{ip}, nil)
	if err != nil {
		return nil, err
	}
	e.ServingCertBundle = filepath.Join(dir, "root", "pki", "yurthub-server-current.pem")
	if err := os.MkdirAll(filepath.Dir(e.ServingCertBundle), 0o700); err != nil {
		return nil, err
	}
	cb, err := os.ReadFile(sc)
	if err != nil {
		return nil, err
	}
	kb, err := os.ReadFile(sk)
	if err != nil {
		return nil, err
	}
	return e, os.WriteFile(e.ServingCertBundle, append(cb, kb...), 0o600)
}

// Args are the hub flags that make it this node.
func (e *Edge) Args() []string {
	return []string{"--node-name=" + e.Name, "--client-cert=" + e.Cert, "--client-key=" + e.Key}
}

// PoolArgs are the hub flags for a pool-sharing mode (NODEHUB_POOL_V=4 in the environment logs
// the hubs' debug lines): "none" (no sharing at all), "node" (node
// level only) or "lease" (the pool elects a leader; this hub's pool port is port on its IP). The
// heartbeat is slow so that the cloud bytes are mostly the pool-scope resources'.
func (e *Edge) PoolArgs(mode string, port int) []string {
	// No kubelet here: the hub keeps renewing the node's lease (the pool's ballot) all the same.
	args := append(e.Args(), "--heartbeat-interval-seconds=10", "--nodepool-name=pool-e2e", "--kubelet-health-grace-period=1h",
		"--disk-cache-path="+filepath.Join(e.Dir, "cache-"+mode), "--v=2")
	if v := os.Getenv("NODEHUB_POOL_V"); v != "" {
		args = append(args, "--v="+v)
	}
	switch mode {
	case "none":
		args = append(args, "--pool-scope-resources=")
	case "lease":
		// No NodePool here: the test pool's nodes are trusted to declare themselves.
		args = append(args, "--pool-mode=lease", "--pool-self-declared-membership", "--pool-bind-address="+e.IP.String(), "--pool-port="+strconv.Itoa(port))
	}
	return args
}
