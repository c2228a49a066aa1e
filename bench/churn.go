package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/e2e/harness"
)

// churnFigures are what one rate of EndpointSlice updates cost the hub.
type churnFigures struct {
	rate              int
	updates           int
	took              time.Duration
	blockWrites       int64   // /proc/<pid>/io write_bytes
	fileBytes         float64 // bytes appended to the cache's files
	records           float64
	syncs             float64
	compacted         float64 // bytes compaction wrote
	dropped, errors   float64
	cpu               time.Duration
	switches          int64 // context switches of the hub's threads
	faults            int64 // minor page faults of the hub (the binary's pages faulted back in, new heap)
	peakKiB, afterKiB int64
}

// churnPhase updates distinct EndpointSlices (slice i%services, each second a different set) at
// rate per second for d, from 8 workers, and measures the hub over it (after its writes settle).
func churnPhase(e *env, h *harness.Hub, ns string, services, rate int, d time.Duration, first int) (churnFigures, error) {
	f := churnFigures{rate: rate}
	cpuDir := os.Getenv("BENCH_CPU_DIR") // CPU profiles of the hub (needs --profiling: set BENCH_HEAP_DIR too)
	if idle, _ := time.ParseDuration(os.Getenv("BENCH_IDLE_CPU")); (idle > 0 || cpuDir != "") && first == 0 {
		idleCPU(h, cpuDir, max(idle, 20*time.Second))
	}
	var profiled chan struct{}
	if cpuDir != "" {
		profiled = make(chan struct{})
		go func() {
			defer close(profiled)
			saveCPUProfile(h.HubURL, filepath.Join(cpuDir, fmt.Sprintf("cpu-%d-per-s.pb.gz", rate)), d)
		}()
	}
	if perf := startPerf(h, fmt.Sprintf("perf-%d-per-s.data", rate), d); perf != nil {
		defer perf.Wait()
	}
	before := snapshotHub(h, true)
	jobs := make(chan int)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if _, err := e.c.Admin.DiscoveryV1().EndpointSlices(ns).Update(e.ctx, profileSlice(i%services, i+1), metav1.UpdateOptions{}); err != nil {
					failed.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	start := time.Now()
	for i := first; time.Since(start) < d && failed.Load() == nil; i++ {
		<-tick.C
		jobs <- i
		f.updates++
		if r, err := rssKiB(h); err == nil && r > f.peakKiB {
			f.peakKiB = r
		}
	}
	tick.Stop()
	close(jobs)
	wg.Wait()
	f.took = time.Since(start)
	if err := failed.Load(); err != nil {
		return f, *err
	}
	// Wait for the writes the updates cause: one record each (the shared store's copy, cached as
	// the hub's own; each is a different slice within a second, so nothing coalesces). The
	// apiserver's watch can deliver them many seconds late when it is loaded.
	for i := 0; i < 120; i++ {
		time.Sleep(time.Second)
		if r, _ := h.Metric("nodehub_cache_files_written_total"); r-before.records >= float64(f.updates) {
			break
		}
	}
	time.Sleep(1500 * time.Millisecond)
	after := snapshotHub(h, false)
	f.dropped, f.errors = max(after.dropped, 0)-max(before.dropped, 0), max(after.errors, 0)-max(before.errors, 0)
	f.cpu, f.blockWrites, f.fileBytes = after.cpu-before.cpu, after.disk-before.disk, after.written-before.written
	f.switches = after.switches - before.switches
	f.faults = after.faults - before.faults
	f.records, f.syncs, f.compacted = after.records-before.records, after.syncs-before.syncs, after.compacted-before.compacted
	f.afterKiB, _ = rssKiB(h)
	if profiled != nil {
		<-profiled
	}
	return f, nil
}

// idleCPU prints the hub's CPU per second over d with its clients watching and nothing changing
// (the background every gateway pays all the time; BENCH_IDLE_CPU=60s), and saves a CPU profile
// of it in dir (BENCH_CPU_DIR).
func idleCPU(h *harness.Hub, dir string, d time.Duration) {
	if perf := startPerf(h, "perf-idle.data", d); perf != nil {
		defer perf.Wait()
	}
	s0, c0 := contextSwitches(h.Pid()), must(cpuTime(h.Pid()))
	how := ""
	if dir != "" {
		saveCPUProfile(h.HubURL, filepath.Join(dir, "cpu-idle.pb.gz"), d)
		how = "; profiled"
	} else {
		time.Sleep(d)
	}
	c1, s1 := must(cpuTime(h.Pid())), contextSwitches(h.Pid())
	fmt.Printf("cpu_idle_with_watches\t%.2f ms/s\t\t(hub CPU over %v with its clients watching and no changes, %.1f context switches/s%s)\n",
		float64(c1-c0)/float64(time.Millisecond)/d.Seconds(), d, float64(s1-s0)/d.Seconds(), how)
}

// saveCPUProfile writes a --profiling hub's CPU profile over d to path.
func saveCPUProfile(hubURL, path string, d time.Duration) {
	err := func() error {
		resp, err := http.Get(hubURL + "/debug/pprof/profile?seconds=" + strconv.Itoa(int(d.Seconds())))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s (is the hub run with --profiling? set BENCH_HEAP_DIR too)", resp.Status)
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		if err != nil {
			return err
		}
		return os.WriteFile(path, b, 0o644)
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cpu profile:", err)
	}
}

func (f churnFigures) print() {
	n := float64(f.updates)
	rate := n / f.took.Seconds()
	goal := "≤ 2 KB"
	if f.rate >= 100 {
		goal = "≤ 1 KB"
	}
	tag := fmt.Sprintf("_%d_per_s", f.rate)
	fmt.Printf("updates%s\t%d in %v\t(%.1f/s achieved)\n", tag, f.updates, f.took.Round(time.Second), rate)
	fmt.Printf("block_writes_per_update%s\t%.2f KB\tgoal %s\t(/proc/pid/io write_bytes: %.0f KiB in all)\n", tag, float64(f.blockWrites)/n/1000, goal, float64(f.blockWrites)/1024)
	fmt.Printf("file_bytes_per_update%s\t%.0f B\t\t(bytes written to the cache's files, compaction included; %.0f records, %.2f per update; %.0f chunks dropped, %.0f errors)\n", tag, (f.fileBytes+f.compacted)/n, f.records, f.records/n, f.dropped, f.errors)
	fmt.Printf("syncs_per_second%s\t%.2f\t\t(one sync per interval with writes: an fdatasync of each log written)\n", tag, f.syncs/f.took.Seconds())
	amp := 1.0
	if f.fileBytes > 0 {
		amp = (f.fileBytes + f.compacted) / f.fileBytes
	}
	fmt.Printf("compaction_write_amplification%s\t%.2f\t\t((appended + compaction's bytes) / appended; compaction wrote %.0f KiB)\n", tag, amp, f.compacted/1024)
	fmt.Printf("cpu_per_update%s\t%.3f ms\tgoal ≤ 0.5 ms\t(hub CPU %.2f s; %.1f context switches of its threads per update; %d minor page faults in all)\n", tag, f.cpu.Seconds()*1000/n, f.cpu.Seconds(), float64(f.switches)/n, f.faults)
	// The memory goal is the node profile's (10 updates/s); the 100/s phase is there for flash.
	rssGoal, rssNote := "goal ≤ 20 MiB", ""
	if f.rate >= 100 {
		rssGoal, rssNote = "", "(the memory goal is the node profile's, at 10/s)"
	}
	fmt.Printf("rss_peak_during_updates%s\t%.1f MiB\t%s\t%s\n", tag, float64(f.peakKiB)/1024, rssGoal, rssNote)
	fmt.Printf("rss_after_updates%s\t%.1f MiB\t%s\t%s\n", tag, float64(f.afterKiB)/1024, rssGoal, rssNote)
}

// realDisk describes the file system the cache is on, and refuses a tmpfs (its block writes are
// always 0, so flash figures measured there would be meaningless).
func realDisk(dir string) (string, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		if err := unix.Statfs(parentDir(dir), &st); err != nil {
			return "", err
		}
	}
	switch st.Type {
	case unix.TMPFS_MAGIC, unix.RAMFS_MAGIC:
		return "", fmt.Errorf("the cache directory %s is on a tmpfs: block writes cannot be measured there (set TMPDIR to a directory on a real disk)", dir)
	case unix.EXT4_SUPER_MAGIC:
		return "ext4", nil
	case unix.XFS_SUPER_MAGIC:
		return "xfs", nil
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs", nil
	case unix.F2FS_SUPER_MAGIC:
		return "f2fs", nil
	}
	return fmt.Sprintf("file system 0x%x", st.Type), nil
}

func parentDir(p string) string {
	for i := len(p) - 1; i > 0; i-- {
		if p[i] == '/' {
			return p[:i]
		}
	}
	return "/"
}

// hubCounters are the hub's counters a churn phase reports the difference of.
type hubCounters struct {
	cpu                                                 time.Duration
	disk, switches, faults                              int64
	written, records, syncs, compacted, dropped, errors float64
}

// snapshotHub reads the hub's counters with one scrape of /metrics; the CPU time is read on the
// side of the scrape away from the phase (after it for the start, before it for the end), so the
// bench's own reads are not counted.
func snapshotHub(h *harness.Hub, start bool) hubCounters {
	var c hubCounters
	if !start {
		c.cpu, _ = cpuTime(h.Pid())
		c.switches = contextSwitches(h.Pid())
		c.faults, _ = minorFaults(h.Pid())
	}
	c.disk, _ = diskWriteBytes(h.Pid())
	m := scrape(h)
	c.written = m["nodehub_cache_written_bytes_total"]
	c.records = m["nodehub_cache_files_written_total"]
	c.syncs = m["nodehub_cache_syncs_total"]
	c.compacted = m["nodehub_cache_compaction_written_bytes_total"]
	c.dropped = m[`nodehub_cache_dropped_total{resource="endpointslices"}`]
	c.errors = m[`nodehub_cache_errors_total{resource="endpointslices"}`]
	if start {
		c.faults, _ = minorFaults(h.Pid())
		c.switches = contextSwitches(h.Pid())
		c.cpu, _ = cpuTime(h.Pid())
	}
	return c
}

// scrape reads every series of the hub's /metrics (nothing when it cannot be read).
func scrape(h *harness.Hub) map[string]float64 {
	out := map[string]float64{}
	_, body, err := h.Get("/metrics")
	if err != nil {
		return out
	}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// contextSwitches sums the voluntary and involuntary context switches of a process's threads (on a
// mostly idle hub, each is a thread that slept and was woken: what a wake-up costs is most of the
// CPU an event costs).
func contextSwitches(pid int) int64 {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var n int64
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
				v, _ := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
				n += v
			} else if rest, ok := strings.CutPrefix(line, "nonvoluntary_ctxt_switches:"); ok {
				v, _ := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
				n += v
			}
		}
	}
	return n
}

func must[T any](v T, _ error) T { return v }

// startPerf records the hub with perf(1) for d when BENCH_PERF_DIR is set: samples of its CPU,
// kernel included, and every switch of one of its threads off the CPU with the stack it left
// from (build the hub unstripped for the symbols, and pass it in NODEHUB_BIN).
func startPerf(h *harness.Hub, name string, d time.Duration) *exec.Cmd {
	dir := os.Getenv("BENCH_PERF_DIR")
	if dir == "" {
		return nil
	}
	perf := exec.Command("perf", "record", "-q", "-e", "cpu-clock/period=250000/", "-e", "sched:sched_switch", "-c", "1", "-g", "-p", strconv.Itoa(h.Pid()),
		"-o", filepath.Join(dir, name), "--", "sleep", strconv.Itoa(int(d.Seconds())))
	if err := perf.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "perf:", err)
		return nil
	}
	return perf
}
