package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"nodehub/e2e/harness"
)

// The init script, run by busybox's sh with busybox's start-stop-daemon, wget and logger (as on a
// gateway): start, status, a watch through the hub, stop while it is open, restart.
func TestInitScriptUnderBusybox(t *testing.T) {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal("busybox not found: install Debian's busybox package (make deps does)")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.MkdirAll(bin, 0o755)
	for _, applet := range []string{"sh", "start-stop-daemon", "wget", "logger", "sleep", "cat", "kill", "mkfifo", "rm", "mv", "wc", "tail"} {
		if err := os.Symlink(bb, filepath.Join(bin, applet)); err != nil {
			t.Fatal(err)
		}
	}
	proxyPort, hubPort := harness.FreePort(), harness.FreePort()
	flags := fmt.Sprintf("--server-addr=%s --node-name=%s --client-cert=%s --client-key=%s --ca-file=%s --proxy-port=%d --serve-port=%d --disk-cache-path=%s --root-dir=%s --enable-dummy-if=false",
		cluster.Servers(), harness.NodeName, cluster.NodeCert, cluster.NodeKey, cluster.PKI.CAFile, proxyPort, hubPort, filepath.Join(dir, "cache"), filepath.Join(dir, "root"))
	defaults := filepath.Join(dir, "defaults")
	os.WriteFile(defaults, []byte("NODEHUB_FLAGS=\""+flags+"\"\n"), 0o644)
	script := filepath.Join(harness.RepoRoot(), "build", "arm", "nodehub.init")
	run := func(arg string) (string, int) {
		cmd := exec.Command(bb, "sh", script, arg)
		cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "NODEHUB_BIN=" + nodehub, "NODEHUB_DEFAULTS=" + defaults,
			"NODEHUB_PIDFILE=" + filepath.Join(dir, "nodehub.pid"), "NODEHUB_LOG=" + filepath.Join(dir, "nodehub.log"),
			"NODEHUB_HEALTHZ=http://127.0.0.1:" + strconv.Itoa(hubPort) + "/v1/healthz"}
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	defer run("stop")
	if out, code := run("start"); code != 0 || !strings.Contains(out, "started") {
		t.Fatalf("start: %d %s", code, out)
	}
	if out, code := run("status"); code != 0 || !strings.Contains(out, "running") {
		t.Fatalf("status: %d %s", code, out)
	}
	if out, _ := run("start"); !strings.Contains(out, "already running") {
		t.Fatalf("second start: %s", out)
	}
	h := &harness.Hub{ProxyURL: "http://127.0.0.1:" + strconv.Itoa(proxyPort), HubURL: "http://127.0.0.1:" + strconv.Itoa(hubPort)}
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs, _ := watchEvents(t, wctx, h, "/api/v1/pods?watch=true&fieldSelector=spec.nodeName%3D"+harness.NodeName, kubeletUA)

	start := time.Now()
	if out, code := run("stop"); code != 0 || !strings.Contains(out, "stopped") {
		t.Fatalf("stop: %d %s", code, out)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("stop with a watch open took %v", d)
	}
	for open := true; open; {
		select {
		case _, open = <-evs:
		case <-time.After(2 * time.Second):
			t.Fatal("the watch outlived the stop")
		}
	}
	if out, code := run("status"); code != 3 || !strings.Contains(out, "stopped") {
		t.Fatalf("status after stop: %d %s", code, out)
	}
	if out, code := run("restart"); code != 0 || !strings.Contains(out, "started") {
		t.Fatalf("restart: %d %s", code, out)
	}
	if out, code := run("status"); code != 0 {
		t.Fatalf("status after restart: %d %s", code, out)
	}
	if _, err := os.Stat("/dev/log"); err != nil { // no syslog here: the script logs to its file
		if log, err := os.ReadFile(filepath.Join(dir, "nodehub.log")); err != nil || !strings.Contains(string(log), "nodehub starting") {
			t.Fatalf("no log file without syslog: %v", err)
		}
	}
}
