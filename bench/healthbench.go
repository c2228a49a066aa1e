package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"nodehub/e2e/harness"
)

// defaultHealthFlags are nodehub's defaults, spelled out (the harness starts hubs with a fast
// heartbeat): heartbeat every 10 s, timeout 2 s, 3 failures, 2 successes.
var defaultHealthFlags = []string{"--v=2", "--heartbeat-interval-seconds=10", "--heartbeat-timeout-seconds=2",
	"--heartbeat-failed-retry=3", "--heartbeat-healthy-threshold=2", "--cache-agents=kubelet"}

// benchHealth measures how fast the hub follows a black-holed link at the default flags: the
// outage noticed in each of several cycles (with the node's clients reading, and with none), the
// return noticed and offline watches ended, what probing costs per hour offline, and a cold start
// in the black hole to the first cached answer.
func benchHealth(e *env, o options) error {
	relay, dir, err := e.relay()
	if err != nil {
		return err
	}
	defer relay.Refuse()
	start := func(noWait bool) (*harness.Hub, error) {
		return e.c.StartHub(e.ctx, harness.HubOptions{Bin: e.bin, Dir: dir, Servers: relay.URL(), NoWait: noWait, Args: defaultHealthFlags})
	}
	r := &healthRun{relay: relay, gauge: `nodehub_server_healthy{server="` + relay.Addr + `"}`,
		list: "/api/v1/pods?fieldSelector=spec.nodeName%3D" + harness.NodeName}
	if err := r.outages(e.ctx, start); err != nil {
		return err
	}
	if err := relay.Pass(); err != nil {
		return err
	}
	// Cold start in the black hole: exec to the first cached answer.
	colds, _, err := coldStarts(relay, start, r.list)
	if err != nil {
		return err
	}
	syns, err := synDropCost(e)
	if err != nil {
		return err
	}
	r.report(o, colds, syns)
	return nil
}

// healthCycles is how many outages benchHealth cuts while the node's clients read.
const healthCycles = 5

// healthRun is what benchHealth measures with one hub behind the relay.
type healthRun struct {
	relay            *harness.Relay
	h                *harness.Hub
	gauge            string // the hub's health gauge of the relay's server
	list             string // kubelet's pod list
	downs, ups, ends []time.Duration
	idle             time.Duration
	conns, sent      int64 // probes and their bytes into the black hole in 30 s
}

// outages starts a hub, warms its cache, and measures the outages with the node's clients
// reading, then one with none, and what 30 s offline cost; the hub is stopped when it returns.
func (r *healthRun) outages(ctx context.Context, start func(noWait bool) (*harness.Hub, error)) error {
	h, err := start(false)
	if err != nil {
		return err
	}
	defer h.Stop()
	r.h = h
	if err := r.warm(); err != nil {
		return err
	}
	if err := r.cycles(ctx); err != nil {
		return err
	}
	return r.idleOutage()
}

// wait waits for the health gauge to read want, and returns how long that took.
func (r *healthRun) wait(want float64, d time.Duration) (time.Duration, error) {
	t0 := time.Now()
	for time.Since(t0) < d {
		if v, err := r.h.Metric(r.gauge); err == nil && v == want {
			return time.Since(t0), nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0, fmt.Errorf("health gauge not %v within %v", want, d)
}

// warm waits for the server to be healthy and caches kubelet's pod list and its Node.
func (r *healthRun) warm() error {
	if _, err := r.wait(1, 10*time.Second); err != nil {
		return err
	}
	cl := &http.Client{Timeout: 30 * time.Second}
	if _, err := timeGet(cl, r.h.ProxyURL+r.list); err != nil {
		return err
	}
	if _, err := timeGet(cl, r.h.ProxyURL+"/api/v1/nodes/"+harness.NodeName); err != nil {
		return err
	}
	settle(r.h)
	return nil
}

// cycles cuts and restores the link healthCycles times while the node's clients are at work:
// kubelet reads its Node every 100 ms; a watch of its pods is open.
func (r *healthRun) cycles(ctx context.Context) error {
	ctx, stopReader := context.WithCancel(ctx)
	defer stopReader()
	go func() {
		rc := &http.Client{Timeout: 10 * time.Second}
		for ctx.Err() == nil {
			_, _ = timeGet(rc, r.h.ProxyURL+"/api/v1/nodes/"+harness.NodeName)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	for i := 0; i < healthCycles; i++ {
		if err := r.cycle(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// cycle is one outage: the link cut, noticed, a pod watch opened offline, the link back, noticed,
// and when that watch ended.
func (r *healthRun) cycle(ctx context.Context, i int) error {
	time.Sleep(time.Duration(3000+1700*i) * time.Millisecond) // cuts at different points of the 10 s heartbeat
	if err := r.relay.BlackHole(); err != nil {
		return err
	}
	d, err := r.wait(0, 30*time.Second)
	if err != nil {
		return err
	}
	r.downs = append(r.downs, d)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ended := make(chan time.Time, 1)
	go func() {
		_ = watchStream(wctx, r.h.ProxyURL+r.list+"&watch=true", kubeletUA)
		ended <- time.Now()
	}()
	time.Sleep(time.Duration(3000+230*i) * time.Millisecond) // returns at different points of the 1 s probes
	if err := r.relay.Pass(); err != nil {
		return err
	}
	back := time.Now()
	u, err := r.wait(1, 30*time.Second)
	if err != nil {
		return err
	}
	r.ups = append(r.ups, u)
	select {
	case at := <-ended:
		r.ends = append(r.ends, at.Sub(back))
	case <-time.After(10 * time.Second):
		r.ends = append(r.ends, -1)
	}
	return nil
}

// idleOutage cuts the link with no client at all: only the heartbeat can notice (three failed
// probes). Then it counts what an hour offline costs: the probes sent into the black hole over 30 s.
func (r *healthRun) idleOutage() error {
	time.Sleep(4 * time.Second)
	if err := r.relay.BlackHole(); err != nil {
		return err
	}
	idle, err := r.wait(0, 60*time.Second)
	if err != nil {
		return err
	}
	r.idle = idle
	conns0, bytes0 := r.relay.HeldConns.Load(), r.relay.Swallowed.Load()
	time.Sleep(30 * time.Second)
	r.conns, r.sent = r.relay.HeldConns.Load()-conns0, r.relay.Swallowed.Load()-bytes0
	return nil
}

// report prints the figures.
func (r *healthRun) report(o options, colds []time.Duration, syns int64) {
	fmt.Printf("\n## health at the default flags (heartbeat 10 s, timeout 2 s, 3 failures, 2 successes), one apiserver behind a relay that black-holes the link (connections accepted, nothing answered)\n")
	fmt.Printf("outage_noticed_each_cycle\t%s\t(kubelet-like client reading its Node every 100 ms; %d cycles of 3–4 s offline)\n", durs(r.downs), healthCycles)
	fmt.Printf("return_noticed_each_cycle\t%s\t(same cycles; unhealthy server probed every second with GET /readyz)\n", durs(r.ups))
	fmt.Printf("offline_watch_ended_after_return\t%s\t(a kubelet pod watch opened offline, per cycle)\n", durs(r.ends))
	fmt.Printf("outage_noticed_idle\t%v\t(no client request at all: the heartbeat and its two retries)\n", r.idle.Round(time.Millisecond))
	perProbe := 0.0
	if r.conns > 0 {
		perProbe = float64(r.sent) / float64(r.conns)
	}
	fmt.Printf("probes_per_hour_offline\t%d\t(connections into the black hole in 30 s ×120)\n", r.conns*120)
	fmt.Printf("bytes_sent_per_hour_offline\t%.0f KB\t(TCP payload into the black hole in 30 s ×120: %.0f B per probe, the TLS ClientHello; plus TCP/IP headers)\n", float64(r.sent*120)/1000, perProbe)
	fmt.Printf("syns_per_hour_offline_dropping_link\t%d SYNs, %d KB\t(a server whose SYNs are dropped: listen queue full; kernel ListenOverflows in 30 s ×120; 60-B SYNs; %.1f a second)\n", syns*120, syns*120*60/1000, float64(syns)/30)
	fmt.Printf("cold_start_black_hole_to_first_cached_answer\t%s\t(exec of a hub with a cache of %d pods to its first answer to kubelet's pod list, 5 starts)\n", durs(colds), o.pods)
}

// durs prints durations rounded to the millisecond, comma-separated.
func durs(ds []time.Duration) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = d.Round(time.Millisecond).String()
	}
	return strings.Join(s, ", ")
}

// synDropCost runs a hub against a server whose SYNs are dropped (a listener whose accept queue is
// full: the kernel drops further SYNs and counts each in TcpExt ListenOverflows, as a dead link
// would swallow them) and counts the SYNs it sends in 30 s once it knows the server is unhealthy.
func synDropCost(e *env) (syns int64, err error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return 0, err
	}
	if err := syscall.Listen(fd, 0); err != nil {
		return 0, err
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		return 0, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	for i := 0; i < 2; i++ { // fill the accept queue (one connection with a backlog of 0)
		if c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond); err == nil {
			defer c.Close()
		}
	}
	e.n++
	dir := filepath.Join(e.dir, fmt.Sprintf("hub-%d", e.n))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	h, err := e.c.StartHub(e.ctx, harness.HubOptions{Bin: e.bin, Dir: dir, Servers: "https://" + addr, Args: defaultHealthFlags})
	if err != nil {
		return 0, err
	}
	defer h.Stop()
	time.Sleep(5 * time.Second)
	before, err := listenOverflows()
	if err != nil {
		return 0, err
	}
	time.Sleep(30 * time.Second)
	after, err := listenOverflows()
	return after - before, err
}

// listenOverflows reads TcpExt ListenOverflows from /proc/net/netstat.
func listenOverflows() (int64, error) {
	b, err := os.ReadFile("/proc/net/netstat")
	if err != nil {
		return 0, err
	}
	lines := strings.Split(string(b), "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		k, v := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		for j := range k {
			if k[j] == "ListenOverflows" && j < len(v) {
				return strconv.ParseInt(v[j], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("no ListenOverflows in /proc/net/netstat")
}
