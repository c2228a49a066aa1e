package hub

import (
	"fmt"
	"net"
	"testing"

	"nodehub/pool"
)

// The secure port listens at the proxy's bind address, the hub's link address and the master
// service host, each once (all of them when the bind address is unspecified), and the serving
// certificate names those IPs and a pool leader's address.
func TestSecureNames(t *testing.T) {
	link := DummyIf{Enabled: true, IP: net.ParseIP("169.254.2.1")}
	for _, c := range []struct {
		bind       string
		port       int
		master     string
		dummy      DummyIf
		mode, pool string
		addrs, ips string
	}{
		{"127.0.0.1", 10268, "169.254.2.1", link, pool.ModeOff, "", "[127.0.0.1:10268 169.254.2.1:10268]", "[127.0.0.1 169.254.2.1]"},
		{"127.0.0.1", 10268, "169.254.2.9", DummyIf{}, pool.ModeOff, "", "[127.0.0.1:10268 169.254.2.9:10268]", "[127.0.0.1 169.254.2.9]"},
		{"0.0.0.0", 10268, "169.254.2.1", link, pool.ModeLease, "10.0.0.5", "[0.0.0.0:10268]", "[0.0.0.0 10.0.0.5]"},
		{"127.0.0.1", 0, "169.254.2.1", link, pool.ModeLease, "10.0.0.5", "[]", "[10.0.0.5]"},
		{"127.0.0.1", 0, "169.254.2.1", link, pool.ModeNodePool, "", "[]", "[]"},
		{"127.0.0.1", 10268, "127.0.0.1", DummyIf{}, pool.ModeLease, "127.0.0.1", "[127.0.0.1:10268]", "[127.0.0.1]"},
	} {
		addrs, ips := SecureNames(c.bind, c.port, c.master, c.dummy, c.mode, c.pool)
		if got := fmt.Sprint(addrs); got != c.addrs {
			t.Errorf("%+v: addresses %s, want %s", c, got, c.addrs)
		}
		if got := fmt.Sprint(ips); got != c.ips {
			t.Errorf("%+v: IPs %s, want %s", c, got, c.ips)
		}
	}
}
