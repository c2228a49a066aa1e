// Command coredns is CoreDNS as published (github.com/coredns/coredns's coremain) with only the
// plugins the e2e tests use, the way CoreDNS builds a custom binary (its plugin.cfg): the
// kubernetes plugin answers cluster.local from its informers; bind keeps it on loopback; errors
// logs what fails.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
)

func init() {
	// In CoreDNS's own order (core/dnsserver/zdirectives.go).
	dnsserver.Directives = []string{"bind", "errors", "kubernetes"}
}

func main() { coremain.Run() }
