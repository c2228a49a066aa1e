package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"nodehub/e2e/harness"
)

// benchIdle is the plain idle figure: a hub with no clients, its RSS read at half of -idle and at
// -idle after start, split into anonymous memory and the binary's pages. A second hub with
// --profiling runs beside it for where the memory is (the Go runtime's own account); its RSS is
// not the figure (heap profiling costs a little memory).
func benchIdle(e *env, o options) error {
	h, err := e.startHub()
	if err != nil {
		return err
	}
	defer h.Stop()
	p, err := e.startHub("--profiling")
	if err != nil {
		return err
	}
	defer p.Stop()
	// BENCH_IDLE_BINS: other builds of nodehub (comma-separated paths) idling beside it, to compare.
	type other struct {
		bin  string
		h    *harness.Hub
		half int64
		peak func() int64
	}
	var extra []*other
	for _, bin := range strings.Split(os.Getenv("BENCH_IDLE_BINS"), ",") {
		if bin == "" {
			continue
		}
		x, err := e.startHubBin(bin)
		if err != nil {
			return err
		}
		defer x.Stop()
		extra = append(extra, &other{bin: bin, h: x})
	}
	time.Sleep(o.idle / 2)
	half, _ := rssKiB(h)
	for _, x := range extra {
		x.half, _ = rssKiB(x.h)
		x.peak = sampleRSS(x.h)
	}
	halfSplit := rssSplit(h)
	peak := sampleRSS(h)
	time.Sleep(o.idle / 2)
	full, _ := rssKiB(h)
	fullSplit := rssSplit(h)
	max := peak()
	var others []string
	for _, x := range extra {
		r, _ := rssKiB(x.h)
		others = append(others, fmt.Sprintf("%s: %.1f MiB at %v (%.1f MiB at %v, at most %.1f MiB between) %s", x.bin, float64(r)/1024, o.idle, float64(x.half)/1024, o.idle/2, float64(x.peak())/1024, rssSplit(x.h)))
	}
	fmt.Println("\n## idle: a plain hub (release build, default flags), no clients")
	fmt.Printf("rss_idle_%v\t%.1f MiB\tgoal ≤ 12 MiB\t%s\n", o.idle/2, float64(half)/1024, halfSplit)
	fmt.Printf("rss_idle_%v\t%.1f MiB\tgoal ≤ 12 MiB\t%s\n", o.idle, float64(full)/1024, fullSplit)
	fmt.Printf("rss_idle_max_%v_%v\t%.1f MiB\t(sampled every 50 ms)\n", o.idle/2, o.idle, float64(max)/1024)
	for _, l := range others {
		fmt.Println("other binary (BENCH_IDLE_BINS)", l)
	}
	if s, err := runtimeMemStats(p.HubURL); err == nil {
		fmt.Printf("runtime (a --profiling hub beside it, RSS %s): %s\n", func() string {
			r, _ := rssKiB(p)
			return fmt.Sprintf("%.1f MiB", float64(r)/1024)
		}(), s)
	}
	return nil
}

// runtimeMemStats reads the MemStats lines a --profiling hub's heap profile ends with.
func runtimeMemStats(hubURL string) (string, error) {
	resp, err := http.Get(hubURL + "/debug/pprof/heap?debug=1")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return "", err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		for _, k := range []string{"# HeapInuse", "# HeapIdle", "# HeapReleased", "# Stack", "# MSpan", "# GCSys", "# OtherSys", "# BuckHashSys", "# NumGoroutine"} {
			if strings.HasPrefix(line, k+" ") || strings.HasPrefix(line, k+"Inuse") || strings.HasPrefix(line, k+"Sys") {
				out = append(out, strings.TrimPrefix(line, "# "))
			}
		}
	}
	return strings.Join(out, ", "), nil
}

// saveHeapProfile writes a --profiling hub's heap profile to path.
func saveHeapProfile(hubURL, path string) error {
	q := ""
	if strings.HasSuffix(path, ".txt") {
		q = "?debug=1" // the text form, which ends with the runtime's MemStats
	}
	resp, err := http.Get(hubURL + "/debug/pprof/heap" + q)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
