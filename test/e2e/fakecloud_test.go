package e2e

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"nodehub/e2e/harness"
)

// newFakeCloud starts a broken proxy in front of the real apiserver for one test (see
// harness.FakeCloud).
func newFakeCloud(t *testing.T) *harness.FakeCloud {
	t.Helper()
	fc, err := cluster.NewFakeCloud()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fc.Close)
	return fc
}

// hijack takes the connection of an HTTP/1.1 request (the hub sends gets and lists that way) to
// write raw bytes: a body cut short of its length, a reset.
func hijack(w http.ResponseWriter) (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		return nil, nil, fmt.Errorf("not HTTP/1.1")
	}
	return hj.Hijack()
}

// reset closes a TCP connection with an RST.
func reset(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		if nc, ok := tc.NetConn().(*net.TCPConn); ok {
			nc.SetLinger(0)
		}
	}
	c.Close()
}

// procStatus returns a /proc/<pid>/status field in KiB (VmRSS, VmHWM) or as a number (Threads).
func procStatus(pid int, field string) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == field+":" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return -1
}

// openFDs counts a process's open file descriptors.
func openFDs(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}
