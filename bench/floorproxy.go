package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"os/exec"
	"strings"
	"time"

	"nodehub/e2e/harness"
)

// The floor of the hop: the least any Go proxy on net/http can cost on the same path. The bench
// runs, in a process of its own as the hub is, net/http/httputil's ReverseProxy with nothing else
// — no cache, no filter, no health check, no metric — plain HTTP from the client, HTTP/1.1 over TLS
// with the node's certificate to the apiserver (as the hub's non-streaming requests go), and times
// it interleaved with the hub and the direct path. What the hub costs over this floor is what its
// own work costs; the floor over the direct path is the extra hop's net/http and kernel.

// floorEnv names the environment variable that makes the bench binary the floor proxy:
// "listen server cert key ca".
const floorEnv = "NODEHUB_BENCH_FLOOR_PROXY"

// runFloorProxyIfAsked serves as the floor proxy (and never returns) when floorEnv is set.
func runFloorProxyIfAsked() {
	spec := os.Getenv(floorEnv)
	if spec == "" {
		return
	}
	if err := floorProxy(strings.Fields(spec)); err != nil {
		fmt.Fprintln(os.Stderr, "floor proxy:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func floorProxy(args []string) error {
	if len(args) != 6 {
		return fmt.Errorf("want listen server cert key ca kind, got %q", args)
	}
	target, err := http.NewRequest(http.MethodGet, args[1], nil) // its URL
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(args[2], args[3])
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(args[4])
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	tr := &http.Transport{MaxIdleConnsPerHost: 8, DisableCompression: true,
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}},
		TLSNextProto:    map[string]func(string, *tls.Conn) http.RoundTripper{}}
	rp := &httputil.ReverseProxy{Transport: tr, Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target.URL) }}
	ln, err := net.Listen("tcp", args[0])
	if err != nil {
		return err
	}
	fmt.Println("listening")
	if args[5] == "raw" {
		cfg := tr.TLSClientConfig.Clone()
		cfg.ServerName = target.URL.Hostname()
		cfg.NextProtos = []string{"http/1.1"}
		return rawFloor(ln, target.URL, cfg)
	}
	return http.Serve(ln, rp)
}

// floor is a running floor proxy.
type floor struct {
	URL string
	cmd *exec.Cmd
}

// startFloor starts a floor proxy in front of c's first apiserver and waits until it listens:
// kind "net/http" (ReverseProxy) or "raw" (floorraw.go).
func startFloor(c *harness.Cluster, kind string) (*floor, error) {
	addr := fmt.Sprintf("127.0.0.1:%d", harness.FreePort())
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), floorEnv+"="+strings.Join([]string{addr, c.APIServers[0].URL, c.NodeCert, c.NodeKey, c.PKI.CAFile, kind}, " "))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan bool, 1)
	go func() { ready <- bufio.NewScanner(out).Scan() }()
	select {
	case ok := <-ready:
		if ok {
			return &floor{URL: "http://" + addr, cmd: cmd}, nil
		}
	case <-time.After(30 * time.Second):
	}
	cmd.Process.Kill()
	cmd.Wait()
	return nil, fmt.Errorf("the floor proxy did not start")
}

// Stop ends the floor proxy.
func (f *floor) Stop() {
	f.cmd.Process.Kill()
	f.cmd.Wait()
}

// Pid is the floor proxy's process id.
func (f *floor) Pid() int { return f.cmd.Process.Pid }
