package e2e

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Nodes on one L2 segment, for tests that run a node's network programs (a CNI agent): each node
// is a network namespace (newNetns), joined to the others by veth pairs; nothing touches the
// host's own links.

// runIP runs ip(8) with args inside the namespace.
func (ns *netns) runIP(args ...string) (string, error) {
	out, err := exec.Command("nsenter", append([]string{"--net=" + ns.Path, "ip"}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// mustRunIP runs ip(8) in the namespace and fails the test if it fails.
func (ns *netns) mustRunIP(t *testing.T, args ...string) string {
	t.Helper()
	out, err := ns.runIP(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// vethJoin links a and b with a veth pair, linkA (addrA, a CIDR) in a and linkB (addrB) in b,
// both up: the two nodes' segment.
func vethJoin(t *testing.T, a, b *netns, linkA, addrA, linkB, addrB string) {
	t.Helper()
	a.mustRunIP(t, "link", "add", linkA, "type", "veth", "peer", "name", linkB)
	// ip(8) moves a link into a namespace named by a process: a thread of this test held in b.
	if err := b.do(func() error {
		_, err := a.runIP("link", "set", linkB, "netns", strconv.Itoa(unix.Gettid()))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	a.mustRunIP(t, "addr", "add", addrA, "dev", linkA)
	a.mustRunIP(t, "link", "set", linkA, "up")
	b.mustRunIP(t, "addr", "add", addrB, "dev", linkB)
	b.mustRunIP(t, "link", "set", linkB, "up")
}

// addPodAddr gives the namespace a pod's address: a /32 on a bridge named link (flannel's CNI plugin's
// cni0 holds the pods' veths).
func (ns *netns) addPodAddr(t *testing.T, link, addr string) {
	t.Helper()
	ns.mustRunIP(t, "link", "add", link, "type", "bridge")
	ns.mustRunIP(t, "addr", "add", addr+"/32", "dev", link)
	ns.mustRunIP(t, "link", "set", link, "up")
}

// DialFromAddr connects from inside the namespace with the source address from (a pod's), so the
// answer must be routed back to it.
func (ns *netns) DialFromAddr(ctx context.Context, from, addr string) (net.Conn, error) {
	var c net.Conn
	err := ns.do(func() (err error) {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
	return c, err
}

// routesVia reports whether the namespace routes dst (a CIDR) via gw.
func (ns *netns) routesVia(dst, gw string) (bool, string, error) {
	out, err := ns.runIP("-4", "route", "show", dst)
	if err != nil {
		return false, out, err
	}
	return strings.Contains(out, dst+" via "+gw+" "), out, nil
}
