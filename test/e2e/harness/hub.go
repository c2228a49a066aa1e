package harness

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// BuildFor cross-builds nodehub for goarch (arm64, or arm with goarm 7) into dir, the way the
// Makefile builds a release (make binary): static, stripped, with the same compiler flags.
func BuildFor(dir, goarch, goarm string) (string, error) {
	out := filepath.Join(dir, "nodehub-"+goarch+goarm)
	cmd := exec.Command("make", "-s", "binary", "OUT="+out)
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(), "GOARCH="+goarch, "GOARM="+goarm)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %v\n%s", goarch, err, b)
	}
	return out, nil
}

// BuildNodehub builds the release binary for this machine into dir, or returns $NODEHUB_BIN.
func BuildNodehub(dir string) (string, error) {
	if bin := os.Getenv("NODEHUB_BIN"); bin != "" {
		return filepath.Abs(bin)
	}
	out, err := BuildFor(dir, runtime.GOARCH, "")
	if err != nil {
		return "", err
	}
	dst := filepath.Join(dir, "nodehub")
	return dst, os.Rename(out, dst)
}

// Hub is a running nodehub process.
type Hub struct {
	*Proc
	ProxyPort, HubPort, SecurePort int
	// ProxyURL is the plain-HTTP proxy port node clients use; HubURL the hub's own endpoints;
	// SecureURL the HTTPS port for pods (bearer tokens only).
	ProxyURL, HubURL, SecureURL string
	CacheDir                    string
	// RootDir is --root-dir (the hub's certificates are in RootDir/pki).
	RootDir string
}

// HubOptions configure StartHub.
type HubOptions struct {
	Bin     string
	Dir     string
	Servers string
	// Args are extra flags, after the defaults (a later flag wins).
	Args []string
	// Env are extra environment variables (NAME=value).
	Env []string
	// NoWait returns as soon as the process started, without waiting for its healthz.
	NoWait bool
	// Emulator, when set, runs Bin under it (qemu-aarch64-static for an arm64 binary).
	Emulator string
	// Bootstrap leaves out the node's certificate and CA flags: the hub gets its identity by
	// itself (--join-token and friends in Args).
	Bootstrap bool
}

// StartHub starts nodehub with the node's certificate and fast heartbeats and waits for its healthz.
func (c *Cluster) StartHub(ctx context.Context, o HubOptions) (*Hub, error) {
	if o.Servers == "" {
		o.Servers = c.Servers()
	}
	h := &Hub{ProxyPort: FreePort(), HubPort: FreePort(), SecurePort: FreePort(), CacheDir: filepath.Join(o.Dir, "cache"), RootDir: filepath.Join(o.Dir, "root")}
	h.ProxyURL = "http://127.0.0.1:" + strconv.Itoa(h.ProxyPort)
	h.HubURL = "http://127.0.0.1:" + strconv.Itoa(h.HubPort)
	h.SecureURL = "https://127.0.0.1:" + strconv.Itoa(h.SecurePort)
	args := []string{
		"--server-addr=" + o.Servers,
		"--node-name=" + NodeName,
		"--proxy-port=" + strconv.Itoa(h.ProxyPort),
		"--serve-port=" + strconv.Itoa(h.HubPort),
		"--proxy-secure-port=" + strconv.Itoa(h.SecurePort),
		"--disk-cache-path=" + h.CacheDir, "--root-dir=" + h.RootDir,
		"--heartbeat-interval-seconds=1", "--v=4",
		// Tests run on the host's network namespace: the hub's link is made only in a namespace a
		// test creates (node_test.go turns it on there).
		"--enable-dummy-if=false",
	}
	if !o.Bootstrap {
		args = append(args, "--client-cert="+c.NodeCert, "--client-key="+c.NodeKey, "--ca-file="+c.PKI.CAFile)
	}
	h.Proc = &Proc{Name: "nodehub", Path: o.Bin, Args: append(args, o.Args...), Env: o.Env, LogFile: filepath.Join(o.Dir, "nodehub.log")}
	if o.Emulator != "" {
		h.Proc.Path, h.Proc.Args = o.Emulator, append([]string{o.Bin}, h.Proc.Args...)
	}
	if err := h.Start(); err != nil {
		return nil, err
	}
	if o.NoWait {
		return h, nil
	}
	if err := h.WaitHTTP(ctx, "/v1/healthz", 20*time.Second); err != nil {
		h.Stop()
		return nil, err
	}
	return h, nil
}

// WaitHTTP polls a hub endpoint until it answers 200.
func (h *Hub) WaitHTTP(ctx context.Context, path string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !h.Running() {
			return fmt.Errorf("nodehub exited:\n%s", tail(h.Log(), 3000))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.HubURL+path, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("nodehub %s not 200 after %v:\n%s", path, d, tail(h.Log(), 3000))
}

// Get fetches a hub endpoint and returns status and body.
func (h *Hub) Get(path string) (int, string, error) {
	resp, err := http.Get(h.HubURL + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// Metric returns the value of one series from /metrics ("name{labels}" exactly as printed), or
// -1 when absent.
func (h *Hub) Metric(series string) (float64, error) {
	_, body, err := h.Get("/metrics")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	return -1, nil
}

// Config returns a rest.Config that talks to the hub's proxy port with no credentials of its own
// (so the hub lends it the node's identity), with userAgent and, when protobuf, protobuf bodies.
func (h *Hub) Config(userAgent string, protobuf bool) *rest.Config {
	cfg := &rest.Config{Host: h.ProxyURL, UserAgent: userAgent, QPS: 1000, Burst: 1000}
	if protobuf {
		cfg.ContentType = "application/vnd.kubernetes.protobuf"
		cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	} else {
		cfg.ContentType, cfg.AcceptContentTypes = "application/json", "application/json"
	}
	return cfg
}

// Client returns a clientset for Config.
func (h *Hub) Client(userAgent string, protobuf bool) *kubernetes.Clientset {
	return kubernetes.NewForConfigOrDie(h.Config(userAgent, protobuf))
}

// CacheWritten waits until everything the hub teed into its cache so far is in the cache's files
// (the writer's queues are empty and none holds pending writes): a test that restarts or reads
// the cache offline waits on this state, never on a sleep of one sync interval.
func (h *Hub) CacheWritten(ctx context.Context) error {
	for {
		busy, err := h.Metric("nodehub_cache_writer_busy_queues")
		if err == nil && busy == 0 {
			if q, err := h.Metric("nodehub_cache_queued_bytes"); err == nil && q == 0 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the hub's cache writes did not finish: %w (busy queues %v)", ctx.Err(), busy)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
