// Command bench measures nodehub against a real control plane and prints a table of figures:
// binary sizes, RSS idle and after load, and GET node / LIST pods latency through the hub versus
// directly, interleaved in one run so both see the same machine.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/e2e/harness"
)

func main() {
	rounds := flag.Int("rounds", 400, "requests of each kind through the hub and directly")
	pods := flag.Int("pods", 110, "pods on the node")
	cpuprofile := flag.String("hub-cpuprofile", "", "write a CPU profile of the hub during the latency rounds to this file")
	sizes := flag.Bool("sizes", true, "build for every architecture and print binary sizes")
	flag.Parse()
	if err := run(*rounds, *pods, *sizes, *cpuprofile); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(rounds, pods int, sizes bool, cpuprofile string) error {
	dir, err := os.MkdirTemp("", "nodehub-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	fmt.Println("## binary size (stripped, CGO_ENABLED=0, -trimpath)")
	for _, arch := range archs(sizes) {
		size, err := buildSize(dir, arch.goarch, arch.goarm)
		if err != nil {
			return err
		}
		fmt.Printf("binary_size_%s\t%.2f MiB\n", arch.name, float64(size)/(1<<20))
	}

	bin, err := harness.BuildNodehub(dir)
	if err != nil {
		return err
	}
	c, err := harness.StartCluster(ctx, dir, 1)
	if err != nil {
		return err
	}
	defer c.Stop()
	if err := makePods(ctx, c, pods); err != nil {
		return err
	}
	hubDir := filepath.Join(dir, "hub")
	if err := os.MkdirAll(hubDir, 0o755); err != nil {
		return err
	}
	h, err := c.StartHub(ctx, harness.HubOptions{Bin: bin, Dir: hubDir, Args: []string{"--v=2", "--heartbeat-interval-seconds=10", "--profiling"}, Env: strings.Fields(os.Getenv("HUB_ENV"))})
	if err != nil {
		return err
	}
	defer h.Stop()
	if err := h.WaitHTTP(ctx, "/v1/readyz", 20*time.Second); err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	idle, err := rssKiB(h)
	if err != nil {
		return err
	}
	fmt.Println("\n## memory")
	fmt.Printf("rss_idle\t%.1f MiB\n", float64(idle)/1024)

	direct, err := directClient(c)
	if err != nil {
		return err
	}
	viaHub := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	node := "/api/v1/nodes/" + harness.NodeName
	list := "/api/v1/pods?fieldSelector=spec.nodeName%3D" + harness.NodeName
	fmt.Printf("\n## latency, %d interleaved rounds, protobuf, %d pods on the node\n", rounds, pods)
	fmt.Println("request\tpath\tmedian\tp99")
	if cpuprofile != "" {
		done := profile(h.HubURL, cpuprofile)
		defer func() { fmt.Fprintln(os.Stderr, "hub cpu profile:", <-done) }()
	}
	for _, q := range []struct{ name, path string }{{"GET node", node}, {"LIST pods", list}} {
		var hubT, dirT []time.Duration
		cpu0, err := cpuTime(h.Pid())
		if err != nil {
			return err
		}
		for i := 0; i < rounds+20; i++ {
			dh, err := timeGet(viaHub, h.ProxyURL+q.path)
			if err != nil {
				return err
			}
			dd, err := timeGet(direct, c.APIServers[0].URL+q.path)
			if err != nil {
				return err
			}
			if i >= 20 { // warm-up
				hubT, dirT = append(hubT, dh), append(dirT, dd)
			}
		}
		cpu1, err := cpuTime(h.Pid())
		if err != nil {
			return err
		}
		mh, md := pct(hubT, 50), pct(dirT, 50)
		fmt.Printf("%s\thub\t%v\t%v\n", q.name, mh, pct(hubT, 99))
		fmt.Printf("%s\tdirect\t%v\t%v\n", q.name, md, pct(dirT, 99))
		fmt.Printf("%s\tratio_median_hub_over_direct\t%.2f\n", q.name, float64(mh)/float64(md))
		fmt.Printf("%s\thub_cpu_per_request\t%v\n", q.name, ((cpu1 - cpu0) / time.Duration(rounds+20)).Round(time.Microsecond))
	}
	loaded, err := rssKiB(h)
	if err != nil {
		return err
	}
	fmt.Printf("\nrss_after_load\t%.1f MiB\n", float64(loaded)/1024)
	return nil
}

type arch struct{ goarch, goarm, name string }

func archs(all bool) []arch {
	if !all {
		return nil
	}
	return []arch{{"amd64", "", "amd64"}, {"arm64", "", "arm64"}, {"arm", "7", "armv7"}}
}

func buildSize(dir, goarch, goarm string) (int64, error) {
	out := filepath.Join(dir, "nodehub-"+goarch+goarm)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, ".")
	cmd.Dir = harness.RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch, "GOARM="+goarm)
	if b, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("build %s: %v\n%s", goarch, err, b)
	}
	st, err := os.Stat(out)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
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
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", "application/vnd.kubernetes.protobuf")
	req.Header.Set("User-Agent", "kubelet/v1.34.4 (linux/amd64) kubernetes/bench")
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

func rssKiB(h *harness.Hub) (int64, error) {
	pid := h.Pid()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			return strconv.ParseInt(f[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

// profile fetches a CPU profile of the hub over the next seconds into file.
func profile(hubURL, file string) <-chan error {
	done := make(chan error, 1)
	go func() {
		resp, err := http.Get(hubURL + "/debug/pprof/profile?seconds=6")
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

// cpuTime is the user+system CPU time the process has used (from /proc/<pid>/stat).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	return time.Duration(utime+stime) * time.Second / 100, nil // USER_HZ is 100 on Linux
}
