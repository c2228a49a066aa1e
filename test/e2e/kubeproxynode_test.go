package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"nodehub/e2e/harness"
)

// kpNode is an edge node's network for the real kube-proxy: a network namespace of its own with
// a link (one end of a veth pair, both ends in it) carrying the node's address and its pods' addresses (a default route through it,
// as a node has), a small TCP server per pod that answers with its pod's name and address, the
// hub's proxy port carried in on loopback, and kube-proxy in it. Rebooting it is making a new
// one: the kernel's rules, connections and addresses of the old are gone with it.
type kpNode struct {
	t       *testing.T
	ns      *netns
	dir     string
	hub     string // the hub's proxy port, inside the namespace
	servers []net.Listener
	proxy   *harness.Proc
}

// Addresses of the test's node network (a private range no host link uses).
const (
	kpNodeIP   = "10.250.0.1"
	kpNodeCIDR = "10.250.0.0/24"
	kpPodPort  = 8080
)

// bootKPNode makes the node's network with pods (address → pod name), each served on kpPodPort. The
// addresses of dead are there too, answering "dead <address>": a connection that reaches one is
// told so at once (not left to time out, which a loaded machine may do for other reasons).
func bootKPNode(t *testing.T, hubProxyAddr string, pods map[string]string, dead ...string) *kpNode {
	t.Helper()
	n := &kpNode{t: t, ns: newNetns(t), dir: t.TempDir()}
	n.ip("link", "add", "node0", "type", "veth", "peer", "name", "node1") // no dummy driver everywhere
	n.ip("link", "set", "node0", "up")
	n.ip("link", "set", "node1", "up")
	n.ip("addr", "add", kpNodeIP+"/24", "dev", "node0")
	n.ip("route", "add", "default", "dev", "node0")
	for addr, name := range pods {
		n.ip("addr", "add", addr+"/32", "dev", "node0")
		ln, err := n.ns.Listen(net.JoinHostPort(addr, fmt.Sprint(kpPodPort)))
		if err != nil {
			t.Fatal(err)
		}
		n.servers = append(n.servers, ln)
		go servePodName(ln, name+" "+addr)
	}
	for _, addr := range dead {
		n.ip("addr", "add", addr+"/32", "dev", "node0")
		ln, err := n.ns.Listen(net.JoinHostPort(addr, fmt.Sprint(kpPodPort)))
		if err != nil {
			t.Fatal(err)
		}
		n.servers = append(n.servers, ln)
		go servePodName(ln, "dead "+addr)
	}
	n.hub = intoNetns(t, n.ns, hubProxyAddr)
	t.Cleanup(n.shutdown)
	return n
}

// servePodName answers every connection with answer, until ln is closed.
func servePodName(ln net.Listener, answer string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = c.Write([]byte(answer + "\n"))
		c.Close()
	}
}

// ip runs ip(8) in the namespace.
func (n *kpNode) ip(args ...string) {
	n.t.Helper()
	out, err := exec.Command("nsenter", append([]string{"--net=" + n.ns.Path, "ip"}, args...)...).CombinedOutput()
	if err != nil {
		n.t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// startKubeProxy runs the real kube-proxy (bin) in the namespace in mode, talking only to the
// hub's proxy port, as the node (no credentials of its own: the hub lends it the node's).
func (n *kpNode) startKubeProxy(bin, mode string) {
	n.t.Helper()
	kc := filepath.Join(n.dir, "kubeconfig")
	cfg := filepath.Join(n.dir, "kube-proxy.yaml")
	if err := os.WriteFile(kc, []byte(harness.PlainKubeconfig("http://"+n.hub)), 0o600); err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(harness.KubeProxyConfig(kc, harness.NodeName, mode, kpNodeIP, kpNodeCIDR)), 0o600); err != nil {
		n.t.Fatal(err)
	}
	n.proxy = &harness.Proc{Name: "kube-proxy", Path: "nsenter", Args: []string{"--net=" + n.ns.Path, bin, "--config=" + cfg, "--v=" + kpVerbosity()},
		LogFile: filepath.Join(n.dir, "kube-proxy.log")}
	if err := n.proxy.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() {
		if n.t.Failed() {
			n.t.Logf("kube-proxy log (%s):\n%s", n.dir, tailString(n.proxy.Log(), 20000))
		}
	})
}

// synced waits until kube-proxy says it programmed the rules (its /healthz).
func (n *kpNode) synced(d time.Duration) {
	n.t.Helper()
	eventually(n.t, d, "kube-proxy healthy (rules programmed)", func() error {
		if !n.proxy.Running() {
			n.t.Fatalf("kube-proxy exited:\n%s", tailString(n.proxy.Log(), 3000))
		}
		ans, err := n.request("127.0.0.1:10256", "GET /healthz HTTP/1.0\r\n\r\n")
		if err != nil {
			return err
		}
		if !strings.Contains(ans, " 200 ") {
			return fmt.Errorf("healthz: %s", ans)
		}
		return nil
	})
}

// dial connects to addr from inside the namespace and returns the first line answered.
func (n *kpNode) dial(addr string) (string, error) {
	return n.request(addr, "")
}

func (n *kpNode) request(addr, send string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := n.ns.Dial(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if send != "" {
		if _, err := c.Write([]byte(send)); err != nil {
			return "", err
		}
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil && line == "" {
		return "", err
	}
	return strings.TrimSpace(line), nil
}

// shutdown stops kube-proxy and the pods and gives the namespace up (a reboot, or the end).
func (n *kpNode) shutdown() {
	if n.proxy != nil {
		n.proxy.Kill()
	}
	for _, ln := range n.servers {
		ln.Close()
	}
	n.servers = nil
	n.ns.Close()
}

// kpSample is one connection to a Service: when it was made, and who answered, or the error.
type kpSample struct {
	at  time.Time
	who string
	err error
}

// kpSampler connects to a Service's address from the current node network every 100 ms, keeping
// every sample, until stopped.
type kpSampler struct {
	mu      sync.Mutex
	node    *kpNode
	samples []kpSample
	stop    chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup // the connections in flight
}

func startKPSampler(t *testing.T, n *kpNode, addr string) *kpSampler {
	s := &kpSampler{node: n, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			s.mu.Lock()
			node := s.node
			s.mu.Unlock()
			if node == nil {
				continue
			}
			// Each connection on its own: one left to time out (no rule yet, an address
			// without a neighbour) does not hold up the next 100 ms sample.
			s.wg.Add(1)
			go func(at time.Time) {
				defer s.wg.Done()
				who, err := node.dial(addr)
				s.mu.Lock()
				s.samples = append(s.samples, kpSample{at: at, who: who, err: err})
				s.mu.Unlock()
			}(time.Now())
		}
	}()
	t.Cleanup(s.end)
	return s
}

// end stops the sampler and waits for it.
func (s *kpSampler) end() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	s.wg.Wait()
}

// on points the sampler at a node network (nil: none, while it reboots).
func (s *kpSampler) on(n *kpNode) {
	s.mu.Lock()
	s.node = n
	s.mu.Unlock()
}

// since returns the samples made at or after t, the earliest first.
func (s *kpSampler) since(t time.Time) []kpSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []kpSample
	for _, x := range s.samples {
		if !x.at.Before(t) {
			out = append(out, x)
		}
	}
	slices.SortFunc(out, func(a, b kpSample) int { return a.at.Compare(b.at) })
	return out
}

// first returns the first sample at or after t that answered with prefix.
func (s *kpSampler) first(t time.Time, prefix string) (kpSample, bool) {
	for _, x := range s.since(t) {
		if x.err == nil && strings.HasPrefix(x.who, prefix) {
			return x, true
		}
	}
	return kpSample{}, false
}

// kpVerbosity is kube-proxy's --v: $NODEHUB_E2E_KUBEPROXY_V, or 2.
func kpVerbosity() string {
	if v := os.Getenv("NODEHUB_E2E_KUBEPROXY_V"); v != "" {
		return v
	}
	return "2"
}

// kpFigureRuns is how many offline status writes TestKubeProxyThroughOfflineReboot times for the
// figure (from kubelet's write to the first connection to the ClusterIP reaching the address it
// reported): $NODEHUB_E2E_KUBEPROXY_FIGURE, or none.
func kpFigureRuns() int {
	n, _ := strconv.Atoi(os.Getenv("NODEHUB_E2E_KUBEPROXY_FIGURE"))
	return n
}

// steady waits until 10 connections in a row, the first made after the call, answered with
// prefix (kube-proxy applied every change so far; it syncs at most once a second).
func (s *kpSampler) steady(t *testing.T, what, prefix string) {
	t.Helper()
	from := time.Now()
	eventually(t, 60*time.Second, what, func() error {
		xs := s.since(from)
		for _, x := range xs {
			if x.err != nil || !strings.HasPrefix(x.who, prefix) {
				from = x.at.Add(time.Nanosecond)
				return fmt.Errorf("%v: %q %v", x.at, x.who, x.err)
			}
		}
		if len(xs) < 10 {
			return fmt.Errorf("%d in a row so far", len(xs))
		}
		return nil
	})
}
