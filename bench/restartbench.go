package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/e2e/harness"
)

// restartMoments are the moments after the cut at which the restart section restarts a client.
var restartMoments = []time.Duration{0, time.Second, 3 * time.Second, 5 * time.Second, 10 * time.Second}

// restartServices is how many Services (each with a 10-endpoint EndpointSlice) CoreDNS resolves.
const restartServices = 100

// benchRestart measures a client restarted at a moment of an outage the hub may not have noticed
// yet (the link black-holed, not refused; default health flags): real CoreDNS (test/e2e/coredns)
// with its own ServiceAccount token on the hub's secure port, restarted 0, 1, 3, 5 and 10 s after
// the cut, from its exec until it resolves every Service's name. Before each moment the link is
// restored, the hub back online and CoreDNS resolving online. The kubelet's figures at the same
// moments are in the kubelet section (kubeletMoments).
func benchRestart(e *env, o options) error {
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	kcm, err := e.c.StartControllerManager(ctx, harness.ControllerOptions{}) // the secure port's certificate
	if err != nil {
		return err
	}
	defer kcm.Stop()
	go e.c.ApproveServingCSRs(ctx)
	const ns = "bench-restart"
	if err := e.c.EnsureNamespace(ctx, ns); err != nil {
		return err
	}
	defer e.c.Admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	if err := makeServices(ctx, e.c, ns, restartServices); err != nil {
		return err
	}
	token, err := e.c.CoreDNSToken(ctx, ns)
	if err != nil {
		return err
	}
	bin, err := harness.CoreDNSBinary()
	if err != nil {
		return err
	}
	relay, dir, err := e.relay()
	if err != nil {
		return err
	}
	defer relay.Close()
	h, err := e.c.StartHub(ctx, harness.HubOptions{Bin: e.bin, Dir: dir, Servers: relay.URL(), Args: []string{"--v=2", "--heartbeat-interval-seconds=10"}})
	if err != nil {
		return err
	}
	defer h.Stop()
	if err := h.WaitHTTP(ctx, "/v1/readyz", 20*time.Second); err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AddCert(e.c.PKI.CA)
	if err := waitSecure(h, &tls.Config{RootCAs: pool}); err != nil {
		return err
	}
	if dir, err = e.hubDir(); err != nil {
		return err
	}
	dns, err := harness.StartCoreDNS(harness.CoreDNSOptions{Bin: bin, Dir: dir, Server: h.SecureURL, CAFile: e.c.PKI.CAFile, Token: token})
	if err != nil {
		return err
	}
	defer dns.Stop()
	want, err := serviceIPs(ctx, e.c, ns)
	if err != nil {
		return err
	}
	fmt.Printf("\n## a client restarted at a moment of an outage: real CoreDNS 1.15 (its own ServiceAccount token, the secure port), %d Services with a 10-endpoint EndpointSlice each, control plane %s; the link black-holed (no answer), default health flags, the hub idle since the cut\n", restartServices, e.c.Version)
	fmt.Println("from CoreDNS's exec to every Service's name resolved; 'hub offline already': the hub noticed the outage before the restart")
	for _, m := range restartMoments {
		took, wasOnline, err := restartDNSAt(ctx, h, relay, dns, want, m)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: coredns restart %v after the cut: %v\n%s\n", m, err, tailLog(dns.Log()))
			return err
		}
		note := ""
		if !wasOnline {
			note = "\t(hub offline already)"
		}
		fmt.Printf("coredns_restart_%ds_after_cut\t%v\tgoal ≤ 2 s%s\n", int(m.Seconds()), took.Round(10*time.Millisecond), note)
	}
	return relay.Pass()
}

// serviceIPs returns each Service's DNS name and ClusterIP.
func serviceIPs(ctx context.Context, c *harness.Cluster, ns string) (map[string]string, error) {
	l, err := c.Admin.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	want := map[string]string{}
	for _, s := range l.Items {
		want[s.Name+"."+ns+".svc.cluster.local."] = s.Spec.ClusterIP
	}
	return want, nil
}

// restartDNSAt restores the link, waits until the hub is online and CoreDNS resolves every name,
// then stops CoreDNS, black-holes the link, waits m and starts CoreDNS: it returns the time from
// that start to every name resolved, and whether the hub was still online at the start.
func restartDNSAt(ctx context.Context, h *harness.Hub, relay *harness.Relay, dns *harness.CoreDNS, want map[string]string, m time.Duration) (time.Duration, bool, error) {
	healthy := `nodehub_server_healthy{server="` + relay.Addr + `"}`
	if err := relay.Pass(); err != nil {
		return 0, false, err
	}
	if err := until(time.Minute, func() error {
		if v, _ := h.Metric(healthy); v != 1 {
			return fmt.Errorf("hub not online (%v)", v)
		}
		return resolvesAll(ctx, dns, want)
	}); err != nil {
		return 0, false, err
	}
	settle(h)
	dns.Stop()
	if err := relay.BlackHole(); err != nil {
		return 0, false, err
	}
	time.Sleep(m)
	v, _ := h.Metric(healthy)
	if err := dns.Start(); err != nil {
		return 0, false, err
	}
	err := until(time.Minute, func() error { return resolvesAll(ctx, dns, want) })
	return time.Since(dns.Started), v == 1, err
}

// resolvesAll reports the first name dns does not resolve to its address.
func resolvesAll(ctx context.Context, dns *harness.CoreDNS, want map[string]string) error {
	for name, ip := range want {
		got, err := dns.Lookup(ctx, name)
		if err != nil {
			return err
		}
		if len(got) != 1 || got[0] != ip {
			return fmt.Errorf("%s resolves to %v, want %s", name, got, ip)
		}
	}
	return nil
}

// until polls f every 20 ms until it returns nil or d passes.
func until(d time.Duration, f func() error) error {
	var err error
	for t0 := time.Now(); time.Since(t0) < d; time.Sleep(20 * time.Millisecond) {
		if err = f(); err == nil {
			return nil
		}
	}
	return err
}

// kubeletMoments restarts the kubelet at each of restartMoments after a cut, as benchRestart does
// CoreDNS, and returns the time from its exec to all n pods' containers running.
func kubeletMoments(ctx context.Context, h *harness.Hub, relay *harness.Relay, hn *harness.HollowNode, n int) ([]time.Duration, error) {
	healthy := `nodehub_server_healthy{server="` + relay.Addr + `"}`
	var out []time.Duration
	for _, m := range restartMoments {
		if err := relay.Pass(); err != nil {
			return out, err
		}
		if err := until(time.Minute, func() error {
			if v, _ := h.Metric(healthy); v != 1 {
				return fmt.Errorf("hub not online (%v)", v)
			}
			return nil
		}); err != nil {
			return out, err
		}
		if _, err := allStarted(ctx, hn, n, time.Now()); err != nil {
			return out, err
		}
		settle(h)
		hn.StopKubelet()
		if err := relay.BlackHole(); err != nil {
			return out, err
		}
		time.Sleep(m)
		t0 := time.Now()
		if err := hn.Kubelet.Start(); err != nil {
			return out, err
		}
		d, err := allStarted(ctx, hn, n, t0)
		if err != nil {
			return out, fmt.Errorf("kubelet restart %v after the cut: %w\n%s", m, err, tailLog(hn.Kubelet.Log()))
		}
		out = append(out, d)
	}
	return out, relay.Pass()
}
