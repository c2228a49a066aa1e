package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"nodehub/e2e/harness"
)

// rssKiB is the hub's resident set size.
func rssKiB(h *harness.Hub) (int64, error) { return procStatusKiB(h.Pid(), "VmRSS") }

// rssSplit describes an RSS figure: the anonymous part (heap, stacks) and the file-backed part
// (the binary's pages).
func rssSplit(h *harness.Hub) string {
	anon, err1 := procStatusKiB(h.Pid(), "RssAnon")
	file, err2 := procStatusKiB(h.Pid(), "RssFile")
	if err1 != nil || err2 != nil {
		return ""
	}
	return fmt.Sprintf("(anonymous %.1f MiB, the binary's pages %.1f MiB)", float64(anon)/1024, float64(file)/1024)
}

// procStatusKiB reads one kB field of /proc/<pid>/status.
func procStatusKiB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			return strconv.ParseInt(f[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s for pid %d", field, pid)
}

// minorFaults is the process's minor page faults so far (from /proc/<pid>/stat).
func minorFaults(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	return strconv.ParseInt(f[7], 10, 64)
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

// diskWriteBytes is what the process caused to be written to storage (/proc/<pid>/io write_bytes).
func diskWriteBytes(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "write_bytes:"); ok {
			return strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
		}
	}
	return 0, fmt.Errorf("no write_bytes for pid %d", pid)
}

// idleAfter is how long a hub runs before its idle RSS is read: start-up has settled, the hub has
// given back what start-up alone needed, and its periodic work (heartbeats, certificate checks,
// garbage collections) has run a few times and paged in what it uses.
const idleAfter = 2 * time.Minute

// sampleRSS samples the hub's RSS every 50 ms until the returned function is called, which
// stops sampling and returns the highest value seen.
func sampleRSS(h *harness.Hub) func() int64 {
	done := make(chan struct{})
	peak := make(chan int64, 1)
	go func() {
		var max int64
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			if r, err := rssKiB(h); err == nil && r > max {
				max = r
			}
			select {
			case <-done:
				peak <- max
				return
			case <-t.C:
			}
		}
	}()
	return func() int64 {
		close(done)
		return <-peak
	}
}

// samplePeakSplit samples the hub's RSS every 50 ms until the returned function is called, which
// returns how the highest sample split: anonymous and the binary's pages.
func samplePeakSplit(h *harness.Hub) func() string {
	done := make(chan struct{})
	out := make(chan string, 1)
	go func() {
		var max, anon, file int64
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		var trace strings.Builder // BENCH_RSS_TRACE=file: every sample, for a look at the burst
		start := time.Now()
		defer func() {
			if name := os.Getenv("BENCH_RSS_TRACE"); name != "" {
				_ = os.WriteFile(name, []byte(trace.String()), 0o644)
			}
		}()
		for {
			r, err1 := procStatusKiB(h.Pid(), "VmRSS")
			a, err2 := procStatusKiB(h.Pid(), "RssAnon")
			f, err3 := procStatusKiB(h.Pid(), "RssFile")
			fmt.Fprintf(&trace, "%.2f\t%d\t%d\t%d\n", time.Since(start).Seconds(), r, a, f)
			if err1 == nil && err2 == nil && err3 == nil && r > max {
				max, anon, file = r, a, f
				if dir := os.Getenv("BENCH_SMAPS_DIR"); dir != "" { // the mappings at the highest sample (no --profiling)
					if smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", h.Pid())); err == nil {
						_ = os.WriteFile(filepath.Join(dir, "smaps-peak.txt"), smaps, 0o644)
					}
				}
			}
			select {
			case <-done:
				out <- fmt.Sprintf("(at the highest sample: anonymous %.1f MiB, the binary's pages %.1f MiB)", float64(anon)/1024, float64(file)/1024)
				return
			case <-t.C:
			}
		}
	}()
	return func() string {
		close(done)
		return <-out
	}
}
