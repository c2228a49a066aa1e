package harness

import (
	"net"
	"strconv"
	"testing"
)

// Ports come from below the ephemeral range, each once, and are free when handed out.
func TestFreePortBelowTheEphemeralRangeAndNeverTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 300 {
		p := FreePort()
		if p < portLow || p >= portHigh {
			t.Fatalf("port %d outside [%d,%d)", p, portLow, portHigh)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
	ln, err := Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	if seen[port] || port >= portHigh {
		t.Fatalf("Listen gave port %d", port)
	}
	// The relay's case: closed, the same address is free to listen on again.
	ln.Close()
	again, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatalf("listen again on %d: %v", port, err)
	}
	again.Close()
}
