package main

import (
	"bufio"
	"crypto/tls"
	"net"
	"net/http"
	neturl "net/url"
)

// rawFloor is the least a Go proxy can cost on the hop, below net/http's server and Transport:
// one goroutine per client connection reads a request (http.ReadRequest), writes it on a TLS
// connection of its own to the apiserver, reads the answer's headers and copies it back, all on
// that goroutine — no pool, no goroutine hand-off, no cancellation, no limits. No hub could be
// this bare; it shows what the machine's kernel and a second process cost.
func rawFloor(ln net.Listener, target *neturl.URL, tlsCfg *tls.Config) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go rawFloorConn(c, target, tlsCfg)
	}
}

func rawFloorConn(c net.Conn, target *neturl.URL, tlsCfg *tls.Config) {
	defer c.Close()
	up, err := tls.Dial("tcp", target.Host, tlsCfg)
	if err != nil {
		return
	}
	defer up.Close()
	br, bw := bufio.NewReader(c), bufio.NewWriter(c)
	ubr, ubw := bufio.NewReader(up), bufio.NewWriter(up)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		req.URL.Scheme, req.URL.Host, req.Host, req.RequestURI = target.Scheme, target.Host, "", ""
		if req.Write(ubw) != nil || ubw.Flush() != nil {
			return
		}
		resp, err := http.ReadResponse(ubr, req)
		if err != nil {
			return
		}
		if resp.Write(bw) != nil || bw.Flush() != nil {
			return
		}
	}
}
