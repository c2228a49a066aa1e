package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/e2e/harness"
)

// benchLatency times GET node and LIST pods through the hub and directly, interleaved.
func benchLatency(e *env, o options) error {
	if err := makePods(e.ctx, e.c, o.pods); err != nil {
		return err
	}
	h, err := e.startHub("--profiling")
	if err != nil {
		return err
	}
	defer h.Stop()
	time.Sleep(o.idle)
	idle, err := rssKiB(h)
	if err != nil {
		return err
	}
	fmt.Println("\n## memory")
	fmt.Printf("rss_idle\t%.1f MiB\t%s, %v after start\n", float64(idle)/1024, rssSplit(h), o.idle)

	direct, err := directClient(e.c)
	if err != nil {
		return err
	}
	viaHub := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	node := "/api/v1/nodes/" + harness.NodeName
	list := "/api/v1/pods?fieldSelector=spec.nodeName%3D" + harness.NodeName
	fl, err := startFloor(e.c, "net/http")
	if err != nil {
		return err
	}
	defer fl.Stop()
	raw, err := startFloor(e.c, "raw")
	if err != nil {
		return err
	}
	defer raw.Stop()
	if args := os.Getenv("BENCH_FLOOR_HUB"); args != "" {
		// A/B on one run: the floor's column is a second hub, with these flags (HUB_ENV too).
		bin := e.bin
		if b := os.Getenv("BENCH_FLOOR_HUB_BIN"); b != "" {
			bin = b // another build of nodehub
		}
		h2, err := e.startHubBin(bin, strings.Fields(args)...)
		if err != nil {
			return err
		}
		defer h2.Stop()
		fl.URL = h2.ProxyURL
		fmt.Printf("(the floor column is a second hub with %s, %s)\n", args, bin)
	}
	fmt.Printf("\n## latency, %d interleaved rounds, protobuf, %d pods on the node\n", o.rounds, o.pods)
	fmt.Println("request\tpath\tmedian\tp99")
	// The rows: GET of the node by a plain client (no filter, no Autonomy condition: the
	// hop alone), and kubelet's LIST of its pods; and kubelet's GET of its node (the Autonomy
	// condition and the node's copy on the way).
	for _, q := range []struct{ name, path, ua, profile string }{
		{"GET node", node, plainUA, o.cpuprofile},
		{"GET node as kubelet", node, kubeletUA, ""},
		{"LIST pods", list, kubeletUA, listProfile(o.cpuprofile)},
	} {
		if err := latencyRounds(h, fl, raw, e.c.APIServers[0].URL, viaHub, direct, q.name, q.path, q.ua, q.profile, o); err != nil {
			return err
		}
	}
	if dir := os.Getenv("BENCH_HEAP_DIR"); dir != "" { // what the rounds allocated, by call site
		for _, f := range []string{"heap-latency.pb.gz", "heap-latency.txt"} {
			if err := saveHeapProfile(h.HubURL, filepath.Join(dir, f)); err != nil {
				fmt.Fprintln(os.Stderr, "heap profile:", err)
			}
		}
	}
	loaded, err := rssKiB(h)
	if err != nil {
		return err
	}
	fmt.Printf("\nrss_after_load\t%.1f MiB\n", float64(loaded)/1024)
	return nil
}

func makePods(ctx context.Context, c *harness.Cluster, n int) error {
	f := false
	for i := 0; i < n; i++ {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("bench-%03d", i), Labels: map[string]string{"app": "bench"}},
			Spec: corev1.PodSpec{NodeName: harness.NodeName, AutomountServiceAccountToken: &f,
				Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/app:1", Env: []corev1.EnvVar{{Name: "A", Value: strings.Repeat("x", 200)}}}}},
		}
		if _, err := c.Admin.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

func directClient(c *harness.Cluster) (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(c.NodeCert, c.NodeKey)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(c.PKI.CA)
	return &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 4,
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}, nil
}

func timeGet(cl *http.Client, url string) (time.Duration, error) {
	return timeGetAs(cl, url, "application/vnd.kubernetes.protobuf")
}

func timeGetAs(cl *http.Client, url, accept string) (time.Duration, error) {
	return timeGetAsUA(cl, url, accept, kubeletUA)
}

const kubeletUA = "kubelet/v1.34.4 (linux/amd64) kubernetes/bench"

// plainUA is a client the hub has no filter or condition for: what it costs is the hop alone.
const plainUA = "bench-client/1.0 (linux/amd64)"

const protobuf = "application/vnd.kubernetes.protobuf"

func timeGetAsUA(cl *http.Client, url, accept, ua string) (time.Duration, error) {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", accept)
	req.Header.Set("User-Agent", ua)
	start := time.Now()
	resp, err := cl.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return d, err
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return s[i].Round(time.Microsecond)
}

// latencyRounds times o.rounds requests of path through the hub and directly, interleaved (after 20
// of each to warm up), and prints the medians, the p99s, their ratio, the hub's CPU and context
// switches per request and the answer's size; with file, a CPU profile of the hub over the first
// o.cpuprofileSeconds of the rounds.
func latencyRounds(h *harness.Hub, fl, raw *floor, server string, viaHub, direct *http.Client, name, path, ua, file string, o options) error {
	if file != "" {
		done := profile(h.HubURL, file, o.cpuprofileSeconds)
		defer func() { fmt.Fprintln(os.Stderr, "hub cpu profile:", file, <-done) }()
	}
	// With BENCH_PERF_DIR, perf(1) records the hub too (every thread, kernel included: the
	// runtime's monitor thread, which a Go profile does not see).
	if perf := startPerf(h, "perf-latency-"+strings.ReplaceAll(name, " ", "-"), time.Duration(o.cpuprofileSeconds)*time.Second); perf != nil {
		defer perf.Wait()
	}
	var hubT, dirT, floorT, rawT []time.Duration
	fcpu0, _ := cpuTime(fl.Pid())
	rcpu0, _ := cpuTime(raw.Pid())
	cpu0, err := cpuTime(h.Pid())
	if err != nil {
		return err
	}
	cs0 := contextSwitches(h.Pid())
	for i := 0; i < o.rounds+20; i++ {
		dh, err := timeGetAsUA(viaHub, h.ProxyURL+path, protobuf, ua)
		if err != nil {
			return err
		}
		dd, err := timeGetAsUA(direct, server+path, protobuf, ua)
		if err != nil {
			return err
		}
		df, err := timeGetAsUA(viaHub, fl.URL+path, protobuf, ua)
		if err != nil {
			return err
		}
		dr, err := timeGetAsUA(viaHub, raw.URL+path, protobuf, ua)
		if err != nil {
			return err
		}
		if i >= 20 { // warm-up
			hubT, dirT, floorT, rawT = append(hubT, dh), append(dirT, dd), append(floorT, df), append(rawT, dr)
		}
	}
	fcpu1, _ := cpuTime(fl.Pid())
	rcpu1, _ := cpuTime(raw.Pid())
	cpu1, err := cpuTime(h.Pid())
	if err != nil {
		return err
	}
	n := time.Duration(o.rounds + 20)
	cs := float64(contextSwitches(h.Pid())-cs0) / float64(n)
	body, _ := getBody(h.ProxyURL+path, ua)
	mh, md := pct(hubT, 50), pct(dirT, 50)
	fmt.Printf("%s\thub\t%v\t%v\n", name, mh, pct(hubT, 99))
	fmt.Printf("%s\tdirect\t%v\t%v\n", name, md, pct(dirT, 99))
	fmt.Printf("%s\tfloor\t%v\t%v\t(net/http's ReverseProxy alone: floorproxy.go)\n", name, pct(floorT, 50), pct(floorT, 99))
	fmt.Printf("%s\tratio_median_hub_over_direct\t%.2f\n", name, float64(mh)/float64(md))
	fmt.Printf("%s\tratio_p99_hub_over_direct\t%.2f\n", name, float64(pct(hubT, 99))/float64(pct(dirT, 99)))
	fmt.Printf("%s\tratio_median_floor_over_direct\t%.2f\n", name, float64(pct(floorT, 50))/float64(md))
	fmt.Printf("%s\tratio_median_hub_over_floor\t%.2f\n", name, float64(mh)/float64(pct(floorT, 50)))
	fmt.Printf("%s\traw_floor\t%v\t%v\t(one goroutine per connection reads, forwards and answers, nothing else: floorraw.go)\n", name, pct(rawT, 50), pct(rawT, 99))
	fmt.Printf("%s\tratio_median_raw_floor_over_direct\t%.2f\n", name, float64(pct(rawT, 50))/float64(md))
	fmt.Printf("%s\tratio_median_hub_over_raw_floor\t%.2f\n", name, float64(mh)/float64(pct(rawT, 50)))
	fmt.Printf("%s\thub_cpu_per_request\t%v\t(context switches %.1f, answer %d bytes; the floor's %v, the raw floor's %v)\n", name, ((cpu1 - cpu0) / n).Round(time.Microsecond), cs, len(body),
		((fcpu1 - fcpu0) / n).Round(time.Microsecond), ((rcpu1 - rcpu0) / n).Round(time.Microsecond))
	return nil
}

// listProfile is the file the LIST rounds' profile goes to: file's name with ".list" before its
// extension.
func listProfile(file string) string {
	if file == "" {
		return ""
	}
	ext := filepath.Ext(file)
	return strings.TrimSuffix(file, ext) + ".list" + ext
}

// profile fetches a CPU profile of the hub over the next seconds into file.
func profile(hubURL, file string, seconds int) <-chan error {
	done := make(chan error, 1)
	go func() {
		resp, err := http.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", hubURL, seconds))
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(file)
		if err != nil {
			done <- err
			return
		}
		_, err = io.Copy(f, resp.Body)
		f.Close()
		done <- err
	}()
	return done
}
