package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// netns is a network namespace the test creates (the host's interfaces are never touched). It
// lives while its file descriptor is open; Path names it for nsenter.
type netns struct {
	fd    int
	Path  string
	close sync.Once
}

// Close gives the namespace up (once; newNetns's cleanup calls it too).
func (ns *netns) Close() { ns.close.Do(func() { unix.Close(ns.fd) }) }

// newNetns creates a network namespace with its loopback up, closed when the test ends.
func newNetns(t *testing.T) *netns {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	type result struct {
		fd  int
		err error
	}
	var r result
	r.err = onOwnThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return err
		}
		var err error
		r.fd, err = unix.Open(threadNetns(), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		return err
	})
	if r.err != nil {
		t.Skipf("cannot create a network namespace: %v", r.err)
	}
	ns := &netns{fd: r.fd, Path: fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), r.fd)}
	t.Cleanup(ns.Close)
	if out, err := exec.Command("nsenter", "--net="+ns.Path, "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("loopback up in the test namespace: %v\n%s", err, out)
	}
	return ns
}

func threadNetns() string { return fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()) }

// onOwnThread runs f locked to a thread and puts the thread back into its network namespace
// afterwards. The thread must survive: a child process started from it (nodehub, with the
// harness's Pdeathsig) would be killed if it ended.
func onOwnThread(f func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := unix.Open(threadNetns(), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer unix.Close(home)
		err = f()
		if rerr := unix.Setns(home, unix.CLONE_NEWNET); rerr == nil {
			runtime.UnlockOSThread()
		} // else the thread stays locked and ends with this goroutine: it is in the wrong namespace
		ch <- err
	}()
	return <-ch
}

// do runs f on a thread inside the namespace; sockets f creates stay in it.
func (ns *netns) do(f func() error) error {
	return onOwnThread(func() error {
		if err := unix.Setns(ns.fd, unix.CLONE_NEWNET); err != nil {
			return err
		}
		return f()
	})
}

// Dial connects from inside the namespace.
func (ns *netns) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := ns.do(func() (err error) {
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Listen opens a listener inside the namespace.
func (ns *netns) Listen(addr string) (net.Listener, error) {
	var ln net.Listener
	err := ns.do(func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	return ln, err
}

// Interface looks a link up inside the namespace.
func (ns *netns) Interface(name string) (*net.Interface, []net.Addr, error) {
	var ifc *net.Interface
	var addrs []net.Addr
	err := ns.do(func() (err error) {
		if ifc, err = net.InterfaceByName(name); err != nil {
			return err
		}
		addrs, err = ifc.Addrs()
		return err
	})
	return ifc, addrs, err
}

// wrapper writes a script that runs its arguments inside the namespace, with prefix (e.g.
// setpriv dropping a capability) in front; it is passed to the harness as HubOptions.Emulator.
func (ns *netns) wrapper(t *testing.T, prefix string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "in-netns")
	script := fmt.Sprintf("#!/bin/sh\nexec nsenter --net=%s %s \"$@\"\n", ns.Path, prefix)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// bridge relays connections accepted on ln to what dial connects to, until the test ends: it
// carries the apiserver (host loopback) into the namespace and the hub's loopback ports out.
func bridge(t *testing.T, ln net.Listener, dial func() (net.Conn, error)) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]bool{}
	)
	track := func(c net.Conn, add bool) {
		mu.Lock()
		defer mu.Unlock()
		if add {
			conns[c] = true
		} else {
			delete(conns, c)
		}
	}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close() // idle keep-alive connections would hold the test for their timeout
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := dial()
			if err != nil {
				c.Close()
				continue
			}
			track(c, true)
			track(up, true)
			wg.Add(1)
			go func() {
				defer wg.Done()
				done := make(chan struct{}, 2)
				cp := func(dst, src net.Conn) {
					_, _ = io.Copy(dst, src)
					if tc, ok := dst.(*net.TCPConn); ok {
						_ = tc.CloseWrite()
					}
					done <- struct{}{}
				}
				go cp(up, c)
				go cp(c, up)
				<-done
				<-done
				c.Close()
				up.Close()
				track(c, false)
				track(up, false)
			}()
		}
	}()
}

// intoNetns makes hostAddr (on the host's loopback) reachable inside ns; it returns the address
// to use there.
func intoNetns(t *testing.T, ns *netns, hostAddr string) string {
	t.Helper()
	ln, err := ns.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bridge(t, ln, func() (net.Conn, error) { return net.Dial("tcp", hostAddr) })
	return ln.Addr().String()
}

// outOfNetns makes nsAddr (inside ns) reachable on the host's loopback; it returns the address.
func outOfNetns(t *testing.T, ns *netns, nsAddr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bridge(t, ln, func() (net.Conn, error) { return ns.Dial(context.Background(), "tcp", nsAddr) })
	return ln.Addr().String()
}
