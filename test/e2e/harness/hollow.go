package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KubeletControllers are the kube-controller-manager controllers a node with a real kubelet needs:
// every namespace's default ServiceAccount, its legacy token, and the kube-root-ca.crt ConfigMap
// that every pod's projected ServiceAccount volume mounts.
var KubeletControllers = []string{"serviceaccount", "serviceaccount-token", "root-ca-cert-publisher"}

// UserAgent is what client-go's default user agent is for component (kubelet, kube-proxy) built
// from the cluster's module without a git commit: "kubelet/v1.34.4 (linux/amd64)
// kubernetes/unknown".
func (c *Cluster) UserAgent(component string) string {
	return fmt.Sprintf("%s/%s (%s/%s) kubernetes/unknown", component, c.Version, runtime.GOOS, runtime.GOARCH)
}

// NodeCredentials issues node name's client certificate (CN system:node:<name>, O system:nodes)
// without creating its Node: its kubelet registers it.
func (c *Cluster) NodeCredentials(name string) (cert, key string, err error) {
	return c.PKI.Issue("node-"+name, "system:node:"+name, []string{"system:nodes"}, nil, nil)
}

// BindNodeProxier grants node's identity the ClusterRole system:node-proxier, what a real cluster
// grants kube-proxy: the hollow kube-proxy gets the node's identity from nodehub.
func (c *Cluster) BindNodeProxier(ctx context.Context, node string) error {
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-node-proxier-" + node},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:node-proxier"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "system:node:" + node}}}
	if _, err := c.Admin.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// HollowOptions configure StartHollowNode.
type HollowOptions struct {
	// Name is the node's name (its kubelet registers it).
	Name string
	// Dir holds the kubeconfigs and the logs. (The kubelet's root directories are where kubemark
	// puts them, a fresh /tmp/hollow-kubelet.* at every start; Stop removes them.)
	Dir string
	// Server is the URL the node's components talk to: nodehub's plain proxy port.
	Server string
	// Proxy also runs the hollow kube-proxy.
	Proxy bool
	// V is the components' klog verbosity (2 when 0).
	V int
}

// HollowNode is kubemark's hollow node: the kubelet's own code (and kube-proxy's) with a fake
// container runtime, talking to the cloud only through Server, with the User-Agent the real
// components send.
type HollowNode struct {
	Name string
	// Kubelet and Proxy are the two kubemark processes (Proxy nil without HollowOptions.Proxy).
	Kubelet, Proxy *Proc
	// KubeletPort, ReadOnlyPort: the kubelet's ports (it binds them on all addresses; kubemark
	// has no flag for the address).
	KubeletPort, ReadOnlyPort int

	shims   []*UAShim
	started time.Time // the first kubelet start
}

// StartHollowNode starts the hollow kubelet (and kube-proxy) of node o.Name; they run until Stop.
// It returns once the kubelet's read-only port answers.
func (c *Cluster) StartHollowNode(ctx context.Context, o HollowOptions) (*HollowNode, error) {
	if o.V == 0 {
		o.V = 2
	}
	n := &HollowNode{Name: o.Name, KubeletPort: FreePort(), ReadOnlyPort: FreePort(), started: time.Now().Add(-time.Second)}
	start := func(morph, component string) (*Proc, error) {
		shim, err := NewUAShim(o.Server, c.UserAgent(component))
		if err != nil {
			return nil, err
		}
		n.shims = append(n.shims, shim)
		kc := filepath.Join(o.Dir, morph+".kubeconfig")
		if err := os.WriteFile(kc, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: hub, cluster: {server: %q}}]
users: [{name: node, user: {}}]
contexts: [{name: hub, context: {cluster: hub, user: node}}]
current-context: hub
`, shim.URL)), 0o600); err != nil {
			return nil, err
		}
		args := []string{"--morph=" + morph, "--name=" + o.Name, "--kubeconfig=" + kc,
			"--v=" + strconv.Itoa(o.V)}
		if morph == "kubelet" {
			args = append(args,
				"--kubelet-port="+strconv.Itoa(n.KubeletPort), "--kubelet-read-only-port="+strconv.Itoa(n.ReadOnlyPort),
				"--use-host-image-service=false",            // the fake runtime's own image service
				"--kube-api-qps=50", "--kube-api-burst=100") // the real kubelet's defaults
		}
		p := &Proc{Name: "kubemark-" + morph, Path: filepath.Join(c.BinDir, "kubemark"), Args: args,
			LogFile: filepath.Join(o.Dir, "kubemark-"+morph+".log")}
		return p, p.Start()
	}
	var err error
	if n.Kubelet, err = start("kubelet", "kubelet"); err != nil {
		n.Stop()
		return nil, err
	}
	if o.Proxy {
		if n.Proxy, err = start("proxy", "kube-proxy"); err != nil {
			n.Stop()
			return nil, err
		}
	}
	if err := n.WaitKubelet(ctx, 60*time.Second); err != nil {
		n.Stop()
		return nil, err
	}
	return n, nil
}

// WaitKubelet waits until the kubelet's read-only port answers /healthz.
func (n *HollowNode) WaitKubelet(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !n.Kubelet.Running() {
			return fmt.Errorf("hollow kubelet exited:\n%s", tail(n.Kubelet.Log(), 3000))
		}
		if _, err := n.readOnly(ctx, "/healthz"); err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("hollow kubelet's read-only port not up after %v:\n%s", d, tail(n.Kubelet.Log(), 3000))
}

// RestartKubelet stops the kubelet (its fake runtime, and so every container, goes with it, as
// on a reboot) and starts it again.
func (n *HollowNode) RestartKubelet(ctx context.Context) error {
	n.StopKubelet()
	if err := n.Kubelet.Start(); err != nil {
		return err
	}
	return n.WaitKubelet(ctx, 60*time.Second)
}

// StopKubelet stops the kubelet and removes the socket of its fake runtime, which kubemark leaves
// in /tmp (kubelet_remote_<random>.sock) when it is stopped by a signal: every such socket made
// since the kubelet started that no process listens on any more.
func (n *HollowNode) StopKubelet() {
	n.Kubelet.Stop()
	paths, _ := filepath.Glob("/tmp/kubelet_remote_*.sock")
	for _, p := range paths {
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.ModTime().Before(n.started) {
			continue
		}
		c, err := net.DialTimeout("unix", p, time.Second)
		if err == nil {
			c.Close() // a live runtime: not ours, or not dead
			continue
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			_ = os.Remove(p)
		}
	}
}

// Stop stops the node's processes and shims.
func (n *HollowNode) Stop() {
	if n.Kubelet != nil {
		n.StopKubelet()
	}
	if n.Proxy != nil {
		n.Proxy.Stop()
	}
	for _, s := range n.shims {
		s.Close()
	}
	if n.Kubelet != nil {
		for _, d := range n.rootDirs() {
			_ = os.RemoveAll(d)
		}
	}
}

func (n *HollowNode) readOnly(ctx context.Context, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(n.ReadOnlyPort)+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("kubelet %s: %s", path, resp.Status)
	}
	return string(b), nil
}

// rootDirRE finds the root directories kubemark made: it makes a fresh one under /tmp at every
// kubelet start (its TMPDIR is not honoured), as a reboot that loses the kubelet's tmpfs would.
var rootDirRE = regexp.MustCompile(`Using (/tmp/hollow-kubelet\.[0-9]+) as root dir for hollow-kubelet`)

// rootDirs returns the kubelet's root directories, oldest first, from its log.
func (n *HollowNode) rootDirs() []string {
	var dirs []string
	for _, m := range rootDirRE.FindAllStringSubmatch(n.Kubelet.Log(), -1) {
		dirs = append(dirs, m[1])
	}
	return dirs
}

// VolumeFile reads a file of a pod's volume as the running kubelet wrote it (under its current
// root directory: pods/<uid>/volumes/kubernetes.io~<plugin>/<volume>/<file>). The fake mounter
// mounts nothing, so the volume plugins write their files into plain directories.
func (n *HollowNode) VolumeFile(uid, plugin, volume, file string) ([]byte, error) {
	dirs := n.rootDirs()
	if len(dirs) == 0 {
		return nil, fmt.Errorf("the kubelet's log names no root directory yet")
	}
	return os.ReadFile(filepath.Join(dirs[len(dirs)-1], "pods", uid, "volumes", "kubernetes.io~"+plugin, volume, file))
}

// Running returns what the kubelet's container runtime runs, from the kubelet's own metrics on its
// read-only port: pods with a running sandbox and running containers.
func (n *HollowNode) Running(ctx context.Context) (pods, containers int, err error) {
	body, err := n.readOnly(ctx, "/metrics")
	if err != nil {
		return 0, 0, err
	}
	pods, containers = -1, -1
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "kubelet_running_pods "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			pods = int(f)
		}
		if v, ok := strings.CutPrefix(line, `kubelet_running_containers{container_state="running"} `); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			containers = int(f)
		}
	}
	if pods < 0 {
		return 0, 0, fmt.Errorf("kubelet metrics lack kubelet_running_pods")
	}
	if containers < 0 {
		containers = 0 // the series appears with the first running container
	}
	return pods, containers, nil
}

// ErrorLines returns the klog error lines ("E1123 …") of a component's log from byte offset on.
func ErrorLines(log string, offset int) []string {
	if offset > len(log) {
		offset = len(log)
	}
	var out []string
	for _, line := range strings.Split(log[offset:], "\n") {
		if len(line) > 5 && line[0] == 'E' && line[1] >= '0' && line[1] <= '9' {
			out = append(out, line)
		}
	}
	return out
}
