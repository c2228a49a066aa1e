//go:build linux

package dummyif

import (
	"net"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

func TestValidateIP(t *testing.T) {
	for _, tc := range []struct {
		ip string
		ok bool
	}{
		{"169.254.2.1", true}, {"169.254.0.5", true}, {"169.254.31.1", false}, {"169.254.1.1", false},
		{"10.0.0.1", false}, {"fd00::2:1", true}, {"::1", false}, {"", false},
	} {
		if err := ValidateIP(net.ParseIP(tc.ip)); (err == nil) != tc.ok {
			t.Errorf("ValidateIP(%q) = %v, want ok=%v", tc.ip, err, tc.ok)
		}
	}
	for _, tc := range []struct {
		name string
		ok   bool
	}{{"hub-dummy0", true}, {"", false}, {"a-very-long-name-x", false}, {"a/b", false}, {"a b", false}} {
		if err := ValidateName(tc.name); (err == nil) != tc.ok {
			t.Errorf("ValidateName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// inNewNetns runs f on a thread moved into a new network namespace (the host's links are never
// touched); the thread is discarded afterwards.
func inNewNetns(t *testing.T, f func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	done := make(chan struct{})
	var skip error
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			skip = err
			return
		}
		f()
	}()
	<-done
	if skip != nil {
		t.Skipf("unshare(CLONE_NEWNET): %v", skip)
	}
}

func TestEnsureIdempotentAndRepairs(t *testing.T) {
	inNewNetns(t, func() {
		l := &Link{Name: DefaultName, IP: net.ParseIP(DefaultIPv4)}
		for i := 0; i < 2; i++ {
			if err := l.Ensure(); err != nil {
				t.Errorf("ensure %d: %v", i, err)
				return
			}
		}
		check := func(what string) {
			ifc, err := net.InterfaceByName(DefaultName)
			if err != nil {
				t.Errorf("%s: %v", what, err)
				return
			}
			addrs, _ := ifc.Addrs()
			if !holds(addrs, l.IP) || ifc.Flags&net.FlagUp == 0 {
				t.Errorf("%s: link %v addrs %v: want up with %s", what, ifc.Flags, addrs, l.IP)
			}
		}
		check("after ensure")
		t.Logf("created as %q", l.kind)
		// Someone removes it: the next ensure brings it back.
		if err := l.Remove(); err != nil {
			t.Errorf("remove: %v", err)
		}
		if _, err := net.InterfaceByName(DefaultName); err == nil {
			t.Errorf("link still there after Remove")
		}
		if err := l.Ensure(); err != nil {
			t.Errorf("re-ensure: %v", err)
		}
		check("after re-ensure")
		// An IPv6 address on another link.
		l6 := &Link{Name: "hub-dummy6", IP: net.ParseIP(DefaultIPv6)}
		if err := l6.Ensure(); err != nil {
			t.Errorf("ensure v6: %v", err)
		}
		if err := l.Remove(); err != nil {
			t.Errorf("remove: %v", err)
		}
	})
}

func BenchmarkEnsureInPlace(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	// A benchmark cannot give its thread back: run in a fresh namespace on a thread that dies.
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			b.Error(err)
			return
		}
		l := &Link{Name: DefaultName, IP: net.ParseIP(DefaultIPv4)}
		if err := l.Ensure(); err != nil {
			b.Error(err)
			return
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := l.Ensure(); err != nil {
				b.Error(err)
				return
			}
		}
	}()
	<-done
}

func holds(addrs []net.Addr, ip net.IP) bool {
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}
