package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/e2e/harness"
)

// flannelNetConf is the kube-flannel ConfigMap's net-conf.json: the cluster's pod network, host-gw
// (the two nodes share the veth's segment).
const flannelNetConf = `{"Network": "10.244.0.0/16", "Backend": {"Type": "host-gw"}}`

// flannelNode is one node of the flannel tests: a network namespace on the veth segment, a pod
// address of its podCIDR, its nodehub (in the namespace, reaching the apiserver through a relay
// on the host) and its flanneld.
type flannelNode struct {
	name, addr, podCIDR, pod string
	moved                    string // the address the node had before addr, when it changed
	ns                       *netns
	relay                    *harness.Relay
	api                      string // the relay's address inside the namespace
	hub                      *harness.Hub
	fl                       *harness.Flannel
}

// gateway is the node's own address on the segment, flannel's public-ip.
func (n *flannelNode) gateway() string { return strings.Split(n.addr, "/")[0] }

// link is the node's end of the veth pair.
func (n *flannelNode) link() string { return "veth-" + strings.TrimPrefix(n.name, "flannel-") }

// flannelToken creates ServiceAccount kube-flannel/flannel with kube-flannel's ClusterRole (read
// nodes, patch their status) and returns a token for it, as flannel's pod has.
func flannelToken(t *testing.T, ctx context.Context) string {
	t.Helper()
	ns := "kube-flannel"
	if err := cluster.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	return saToken(t, ctx, ns, "flannel", "flannel", rbacv1.PolicyRule{Verbs: []string{"get", "list", "watch", "patch"},
		APIGroups: []string{""}, Resources: []string{"nodes", "nodes/status"}})
}

// flannelNodes creates the two Nodes with their podCIDRs (deleted when the test ends) and their
// namespaces joined by a veth pair, each with a pod address.
func flannelNodes(t *testing.T, ctx context.Context) (a, b *flannelNode) {
	t.Helper()
	a = &flannelNode{name: "flannel-a", addr: "10.251.0.1/24", podCIDR: "10.244.1.0/24", pod: "10.244.1.10"}
	b = &flannelNode{name: "flannel-b", addr: "10.251.0.2/24", podCIDR: "10.244.2.0/24", pod: "10.244.2.10"}
	for _, n := range []*flannelNode{a, b} {
		// With the annotation kubelet registers its Node with (flannel adds to the map it finds).
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: map[string]string{"kubernetes.io/hostname": n.name},
			Annotations: map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
			Spec: corev1.NodeSpec{PodCIDR: n.podCIDR, PodCIDRs: []string{n.podCIDR}}}
		if _, err := cluster.Admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cluster.Admin.CoreV1().Nodes().Delete(context.Background(), n.name, metav1.DeleteOptions{})
		})
		n.ns = newNetns(t)
	}
	vethJoin(t, a.ns, b.ns, "veth-a", a.addr, "veth-b", b.addr)
	a.ns.addPodAddr(t, "cni0", a.pod)
	b.ns.addPodAddr(t, "cni0", b.pod)
	return a, b
}

// startNodeHub runs the node's nodehub in its namespace as that node, reaching the apiserver
// through a relay of its own, and waits until its secure port serves a CA-signed certificate.
func startNodeHub(t *testing.T, n *flannelNode) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var err error
	if n.relay, err = harness.NewRelay(strings.TrimPrefix(cluster.APIServers[0].URL, "https://")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.relay.Close)
	n.api = intoNetns(t, n.ns, n.relay.Addr)
	cert, key, err := cluster.NodeCredentials(n.name)
	if err != nil {
		t.Fatal(err)
	}
	// As a cluster grants kube-proxy: the hub's shared store lists endpointslices as the node.
	if err := cluster.BindNodeProxier(ctx, n.name); err != nil {
		t.Fatal(err)
	}
	n.hub, err = cluster.StartHub(ctx, harness.HubOptions{Bin: nodehub, Dir: t.TempDir(), Servers: "https://" + n.api,
		Args:     []string{"--node-name=" + n.name, "--client-cert=" + cert, "--client-key=" + key, "--heartbeat-timeout-seconds=1"},
		Emulator: n.ns.wrapper(t, ""), NoWait: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.hub.Stop()
		if t.Failed() {
			t.Logf("%s nodehub log:\n%s", n.name, tailString(n.hub.Log(), 5000))
		}
	})
	n.hub.HubURL = "http://" + outOfNetns(t, n.ns, "127.0.0.1:"+strconv.Itoa(n.hub.HubPort))
	if err := n.hub.WaitHTTP(ctx, "/v1/readyz", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, n.name+"'s secure port serving with a CA-signed certificate", func() error {
		return n.secureServing(ctx)
	})
}

// secureServing dials the hub's secure port from inside the node, checking its certificate.
func (n *flannelNode) secureServing(ctx context.Context) error {
	pool := x509.NewCertPool()
	pool.AddCert(cluster.PKI.CA)
	c, err := n.ns.Dial(ctx, "tcp", strings.TrimPrefix(n.hub.SecureURL, "https://"))
	if err != nil {
		return err
	}
	tc := tls.Client(c, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	defer tc.Close()
	return tc.HandshakeContext(ctx)
}

// startFlannel runs flanneld in the node's namespace against its hub's secure port.
func startFlannel(t *testing.T, n *flannelNode, bin, token string) {
	t.Helper()
	var err error
	n.fl, err = harness.StartFlannel(harness.FlannelOptions{Bin: bin, Wrap: n.ns.wrapper(t, ""), Dir: t.TempDir(),
		Node: n.name, Iface: n.link(), Server: n.hub.SecureURL,
		CAFile: cluster.PKI.CAFile, Token: token, NetConf: flannelNetConf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.fl.Stop()
		if t.Failed() {
			t.Logf("%s flanneld log:\n%s", n.name, tailString(n.fl.Log(), 5000))
		}
	})
}

// subnetEnv is what flannel wrote for its CNI plugin ("" before it did).
func (n *flannelNode) subnetEnv() string {
	b, _ := os.ReadFile(n.fl.SubnetFile)
	return string(b)
}

// programmed checks the node's flannel is up: its subnet.env names its podCIDR and it routes the
// other node's pod subnet via the other node.
func (n *flannelNode) programmed(other *flannelNode) error {
	if !n.fl.Running() {
		return errorf("%s: flanneld exited:\n%s", n.name, tailString(n.fl.Log(), 2000))
	}
	want := "FLANNEL_SUBNET=" + strings.TrimSuffix(n.podCIDR, "0/24") + "1/24"
	if env := n.subnetEnv(); !strings.Contains(env, want+"\n") {
		return errorf("%s: subnet.env %q lacks %s", n.name, env, want)
	}
	ok, routes, err := n.ns.routesVia(other.podCIDR, other.gateway())
	if err != nil || !ok {
		return errorf("%s: no route to %s via %s (%v): %s", n.name, other.podCIDR, other.gateway(), err, routes)
	}
	return nil
}

// servePod answers each connection to the node's pod address on port with the pod's address.
func servePod(t *testing.T, n *flannelNode, port int) {
	t.Helper()
	ln, err := n.ns.Listen(net.JoinHostPort(n.pod, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, n.pod+"\n")
			c.Close()
		}
	}()
}

// podToPod connects from from's pod address to to's pod server and reads its answer: both nodes'
// routes carry it (the answer goes back to a pod address).
func podToPod(from, to *flannelNode, port int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := from.ns.DialFromAddr(ctx, from.pod, net.JoinHostPort(to.pod, strconv.Itoa(port)))
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != to.pod {
		return errorf("pod %s answered %q", to.pod, line)
	}
	return nil
}

// flannelAnnotations are the node's flannel.alpha.coreos.com annotations and podCIDR in the cloud.
func flannelAnnotations(t *testing.T, ctx context.Context, node string) map[string]string {
	t.Helper()
	n, err := cluster.Admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{"podCIDR": n.Spec.PodCIDR}
	for k, v := range n.Annotations {
		if strings.HasPrefix(k, "flannel.alpha.coreos.com/") {
			out[k] = v
		}
	}
	return out
}

// nodePatches counts the patches of nodes (and nodes/status) the hub answered, online and
// offline, and of them those answered 200, from /metrics.
func nodePatches(t *testing.T, h *harness.Hub) (all, ok float64) {
	t.Helper()
	_, body, err := h.Get("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "nodehub_requests_total{") && strings.Contains(line, `verb="patch"`) && strings.Contains(line, `resource="nodes`) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			all += v
			if strings.Contains(line, `code="200"`) {
				ok += v
			}
		}
	}
	return all, ok
}

// hubHealth waits until the hub's server (the relay) is healthy (want 1) or not (0).
func hubHealth(t *testing.T, n *flannelNode, want float64) {
	t.Helper()
	eventually(t, 60*time.Second, n.name+"'s hub server health", func() error {
		if v, _ := n.hub.Metric(`nodehub_server_healthy{server="` + n.api + `"}`); v != want {
			return errorf("server healthy %v, want %v", v, want)
		}
		return nil
	})
}

// approveServing approves the serving certificates the hubs of the named node users ask for, as
// the cluster's approver would, until the test ends.
func approveServing(t *testing.T, users ...string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		<-done
	})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			_, _ = cluster.ApprovePendingServingCSRs(ctx, users...)
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
}
