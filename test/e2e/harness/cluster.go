// Package harness runs a real control plane (etcd and kube-apiservers built from the Go module
// proxy) and the real nodehub binary for nodehub's end-to-end tests and benchmarks.
package harness

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// NodeName is the edge node the tests play.
const NodeName = "edge-1"

// Cluster is a running control plane.
type Cluster struct {
	// Release is the Kubernetes release of every binary the cluster runs; Version its exact
	// version ("v1.37.2").
	Release    Release
	Version    string
	Dir        string
	BinDir     string
	PKI        *PKI
	Etcd       *Proc
	APIServers []*APIServer

	AdminCert, AdminKey string
	NodeCert, NodeKey   string
	Admin               *kubernetes.Clientset
	AdminConfig         *rest.Config
}

// APIServer is one kube-apiserver of the cluster.
type APIServer struct {
	*Proc
	Port int
	URL  string
}

// RepoRoot finds the nodehub checkout from this source file's location.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// Release is one Kubernetes release the harness runs: etcd, the control plane and kubemark's hollow
// node are built (controlplane/build.sh) from the module in test/e2e/<Dir>, whose go.mod pins
// k8s.io/kubernetes.
type Release struct {
	// Name is the minor release, "v1.34".
	Name string
	// Dir is the module's directory under test/e2e.
	Dir string
	// APIServerArgs are the release's own kube-apiserver flags, after the harness's.
	APIServerArgs []string
}

// Releases are the Kubernetes releases the harness runs, oldest first.
func Releases() []Release {
	return []Release{
		{Name: "v1.34", Dir: "controlplane"},
		// Since v1.35 the endpoint reconciler refuses a loopback --advertise-address ("may not be
		// in the loopback range"): the default/kubernetes Service gets no endpoints here.
		{Name: "v1.37", Dir: "controlplane137", APIServerArgs: []string{"--endpoint-reconciler-type=none"}},
	}
}

// DefaultRelease is the release the e2e tests run on unless a test picks one: $NODEHUB_E2E_KUBE
// ("v1.34", "v1.37") or v1.34, the release most tests were written against.
func DefaultRelease() (Release, error) {
	name := os.Getenv("NODEHUB_E2E_KUBE")
	if name == "" {
		name = "v1.34"
	}
	return ReleaseNamed(name)
}

// ReleaseNamed returns the release called name ("v1.37", or "1.37").
func ReleaseNamed(name string) (Release, error) {
	var names []string
	for _, r := range Releases() {
		if r.Name == name || r.Name == "v"+name {
			return r, nil
		}
		names = append(names, r.Name)
	}
	return Release{}, fmt.Errorf("no Kubernetes release %q in the harness (have %s)", name, strings.Join(names, ", "))
}

// ModuleDir is the release's module directory.
func (r Release) ModuleDir() string { return filepath.Join(RepoRoot(), "test", "e2e", r.Dir) }

// Binaries builds (once per go.sum) and returns the directory holding the release's etcd,
// kube-apiserver, kube-controller-manager, kubectl and kubemark.
func (r Release) Binaries() (string, error) {
	script := filepath.Join(RepoRoot(), "test", "e2e", "controlplane", "build.sh")
	cmd := exec.Command("sh", script, r.ModuleDir())
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("build control plane %s: %w", r.Name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Version is the exact Kubernetes version the release's module pins, as "v1.34.4".
func (r Release) Version() (string, error) {
	b, err := os.ReadFile(filepath.Join(r.ModuleDir(), "go.mod"))
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes (v[0-9][0-9.]*)\s*$`).FindSubmatch(b)
	if m == nil {
		return "", fmt.Errorf("%s/go.mod names no k8s.io/kubernetes version", r.Dir)
	}
	return string(m[1]), nil
}

// StartCluster starts etcd and n kube-apiservers of the default release (DefaultRelease) on
// loopback, all in dir.
func StartCluster(ctx context.Context, dir string, n int) (*Cluster, error) {
	r, err := DefaultRelease()
	if err != nil {
		return nil, err
	}
	return StartClusterAt(ctx, r, dir, n)
}

// StartClusterAt starts etcd and n kube-apiservers of release r on loopback, all in dir.
func StartClusterAt(ctx context.Context, r Release, dir string, n int) (*Cluster, error) {
	version, err := r.Version()
	if err != nil {
		return nil, err
	}
	bin, err := r.Binaries()
	if err != nil {
		return nil, err
	}
	c := &Cluster{Release: r, Version: version, Dir: dir, BinDir: bin}
	if c.PKI, err = NewPKI(dir); err != nil {
		return nil, err
	}
	loop := []net.IP{net.ParseIP("127.0.0.1")}
	servingCert, servingKey, err := c.PKI.Issue("apiserver", "kube-apiserver", nil, loop, []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"})
	if err != nil {
		return nil, err
	}
	if c.AdminCert, c.AdminKey, err = c.PKI.Issue("admin", "admin", []string{"system:masters"}, nil, nil); err != nil {
		return nil, err
	}
	if c.NodeCert, c.NodeKey, err = c.PKI.Issue("node", "system:node:"+NodeName, []string{"system:nodes"}, nil, nil); err != nil {
		return nil, err
	}
	saPub, saKey, err := c.PKI.ServiceAccountKey()
	if err != nil {
		return nil, err
	}

	clientPort, peerPort := FreePort(), FreePort()
	c.Etcd = &Proc{Name: "etcd", Path: filepath.Join(bin, "etcd"), LogFile: filepath.Join(dir, "etcd.log"), Args: []string{
		"--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", clientPort),
		"--advertise-client-urls", fmt.Sprintf("http://127.0.0.1:%d", clientPort),
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort),
		"--initial-cluster", fmt.Sprintf("default=http://127.0.0.1:%d", peerPort),
		"--unsafe-no-fsync", "--log-level", "warn",
	}}
	if err := c.Etcd.Start(); err != nil {
		return nil, err
	}
	for i := 0; i < n; i++ {
		port := FreePort()
		a := &APIServer{Port: port, URL: fmt.Sprintf("https://127.0.0.1:%d", port)}
		a.Proc = &Proc{Name: fmt.Sprintf("kube-apiserver-%d", i), Path: filepath.Join(bin, "kube-apiserver"),
			LogFile: filepath.Join(dir, fmt.Sprintf("apiserver-%d.log", i)), Args: []string{
				"--etcd-servers", fmt.Sprintf("http://127.0.0.1:%d", clientPort),
				"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
				"--secure-port", strconv.Itoa(port),
				"--cert-dir", filepath.Join(dir, fmt.Sprintf("apiserver-%d", i)),
				"--tls-cert-file", servingCert, "--tls-private-key-file", servingKey,
				"--client-ca-file", c.PKI.CAFile,
				"--service-account-key-file", saPub, "--service-account-signing-key-file", saKey,
				"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
				"--authorization-mode", "Node,RBAC",
				"--enable-admission-plugins", "NodeRestriction",
				"--service-cluster-ip-range", "10.96.0.0/16",
				"--allow-privileged", "--profiling=false", "--v", "0",
				"--enable-bootstrap-token-auth",
			}}
		a.Args = append(a.Args, r.APIServerArgs...)
		c.APIServers = append(c.APIServers, a)
		if err := a.Start(); err != nil {
			c.Stop()
			return nil, err
		}
	}
	for _, a := range c.APIServers {
		if err := c.WaitReady(ctx, a, 90*time.Second); err != nil {
			c.Stop()
			return nil, err
		}
	}
	c.AdminConfig = c.ConfigFor(c.APIServers[0].URL)
	if c.Admin, err = kubernetes.NewForConfig(c.AdminConfig); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.bootstrap(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// ConfigFor returns an admin rest.Config for one server.
func (c *Cluster) ConfigFor(url string) *rest.Config {
	return &rest.Config{Host: url, QPS: 1000, Burst: 1000, TLSClientConfig: rest.TLSClientConfig{
		CAFile: c.PKI.CAFile, CertFile: c.AdminCert, KeyFile: c.AdminKey,
	}}
}

// NodeConfigFor returns a rest.Config with the node's own certificate for one server.
func (c *Cluster) NodeConfigFor(url string) *rest.Config {
	return &rest.Config{Host: url, QPS: 1000, Burst: 1000, TLSClientConfig: rest.TLSClientConfig{
		CAFile: c.PKI.CAFile, CertFile: c.NodeCert, KeyFile: c.NodeKey,
	}}
}

// WaitReady polls the server's /readyz with admin credentials.
func (c *Cluster) WaitReady(ctx context.Context, a *APIServer, d time.Duration) error {
	cert, err := tls.LoadX509KeyPair(c.AdminCert, c.AdminKey)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AddCert(c.PKI.CA)
	cl := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}
	defer cl.CloseIdleConnections()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !a.Running() {
			return fmt.Errorf("%s exited:\n%s", a.Name, tail(a.Log(), 3000))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.URL+"/readyz", nil)
		if resp, err := cl.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %v:\n%s", a.Name, d, tail(a.Log(), 3000))
}

// bootstrap creates the edge node and the default ServiceAccount the tests' namespaces need.
func (c *Cluster) bootstrap(ctx context.Context) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: NodeName, Labels: map[string]string{"kubernetes.io/hostname": NodeName}}}
	if _, err := c.Admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return c.EnsureNamespace(ctx, "default")
}

// EnsureNamespace creates a namespace and its default ServiceAccount (no controller-manager runs).
func (c *Cluster) EnsureNamespace(ctx context.Context, ns string) error {
	_, err := c.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err = c.Admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond) // the namespace may still be initialising
	}
}

// BindNodes grants the system:nodes group one rule, cluster-wide (what a real cluster's admin
// would grant kube-proxy or an agent; here the test clients use the node's identity).
func (c *Cluster) BindNodes(ctx context.Context, name string, rule rbacv1.PolicyRule) error {
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{rule}}
	if _, err := c.Admin.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: "system:nodes"}}}
	if _, err := c.Admin.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// Restart stops and starts one apiserver and waits until it is ready.
func (c *Cluster) Restart(ctx context.Context, a *APIServer) error {
	a.Stop()
	if err := a.Start(); err != nil {
		return err
	}
	return c.WaitReady(ctx, a, 90*time.Second)
}

// Stop stops every process.
func (c *Cluster) Stop() {
	for _, a := range c.APIServers {
		a.Stop()
	}
	if c.Etcd != nil {
		c.Etcd.Stop()
	}
}

// Servers is the comma list of server URLs, as --server-addr takes it.
func (c *Cluster) Servers() string {
	urls := make([]string, len(c.APIServers))
	for i, a := range c.APIServers {
		urls[i] = a.URL
	}
	return strings.Join(urls, ",")
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
