package harness

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Test ports come from [portLow, portHigh): below the kernel's ephemeral range (32768-60999 on
// Linux by default), which the kernel draws from for the source port of every outgoing
// connection. A port picked there, released, and bound again later by another process can be
// taken in between by an outgoing connection (the bind then fails), and a client dialling it while
// nothing listens can even connect to itself (TCP simultaneous open). Below the range only a
// listener can hold a port, and FreePort's probe sees listeners.
const (
	portLow  = 20000
	portHigh = 32768
)

// ports remembers what this process handed out, so two callers never get the same port even when
// the first has not bound it yet. It is the harness's one piece of package state: tests of one
// process share the loopback interface, so they must share its allocation.
var ports struct {
	sync.Mutex
	given map[int]bool
	high  int
}

// FreePort returns a loopback TCP port below the ephemeral range that nobody listens on now and
// that this process has not handed out before. Ports are drawn at random so that test processes
// running side by side (two engineers, bench beside e2e) rarely probe the same one.
func FreePort() int {
	ln, err := Listen()
	if err != nil {
		panic(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// Listen opens a loopback TCP listener on a port FreePort would return; for a listener that is
// closed and opened again on the same address (a relay a test cuts and restores), or whose port
// is given to another process.
func Listen() (net.Listener, error) {
	ports.Lock()
	defer ports.Unlock()
	if ports.given == nil {
		ports.given, ports.high = map[int]bool{}, portHigh
		if lo := ephemeralLow(); lo > portLow+1000 && lo < ports.high {
			ports.high = lo
		}
	}
	var last error
	for range 1000 {
		p := portLow + rand.IntN(ports.high-portLow)
		if ports.given[p] {
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			last = err
			continue
		}
		ports.given[p] = true
		return ln, nil
	}
	return nil, fmt.Errorf("no free loopback port in [%d,%d): %v", portLow, ports.high, last)
}

// ephemeralLow reads the low end of the kernel's ephemeral port range (0 when unknown).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	lo, _ := strconv.Atoi(f[0])
	return lo
}
