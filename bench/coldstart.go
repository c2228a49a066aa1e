package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"

	"nodehub/e2e/harness"
)

// benchColdStart measures a cold start in a black hole with the node profile's cache: a hub
// fills its cache as the node profile's clients list and watch (110 pods, the Services and
// EndpointSlices, namespaces, the node), stops; then, five times, with the cloud black-holed, a
// hub is started on that cache and kubelet's pod list (protobuf) is asked every millisecond until
// it is answered. It prints the wall time from exec to that answer and the hub's CPU time by then.
func benchColdStart(e *env, o options) error {
	ctx := e.ctx
	if err := e.c.BindNodes(ctx, "bench-profile", rbacv1.PolicyRule{APIGroups: []string{"", "discovery.k8s.io"},
		Resources: []string{"services", "endpointslices", "namespaces"}, Verbs: []string{"get", "list", "watch"}}); err != nil {
		return err
	}
	if err := e.c.EnsureNamespace(ctx, "profile"); err != nil {
		return err
	}
	if err := makeServices(ctx, e.c, "profile", o.services); err != nil {
		return err
	}
	relay, dir, err := e.relay()
	if err != nil {
		return err
	}
	defer relay.Refuse()
	args := []string{"--v=2", "--heartbeat-interval-seconds=10"}
	start := func(noWait bool) (*harness.Hub, error) {
		return e.c.StartHub(ctx, harness.HubOptions{Bin: e.bin, Dir: dir, Servers: relay.URL(), NoWait: noWait, Args: args})
	}
	h, err := start(false)
	if err != nil {
		return err
	}
	if err := h.WaitHTTP(ctx, "/v1/readyz", 20*time.Second); err != nil {
		h.Stop()
		return err
	}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if _, err := profileLists(wctx, h, &wg, false); err != nil {
		stop()
		h.Stop()
		return err
	}
	stop()
	wg.Wait()
	h.Stop()
	cacheBytes := dirBytes(filepath.Join(dir, "cache"))

	walls, cpus, err := coldStarts(relay, start, "/api/v1/pods?fieldSelector=spec.nodeName%3D"+harness.NodeName)
	if err != nil {
		return err
	}
	if keep := os.Getenv("BENCH_COLD_KEEP"); keep != "" { // the hub's directory (cache, root, log), for a look
		if err := exec.Command("cp", "-a", dir, keep).Run(); err != nil {
			return err
		}
	}
	fmt.Printf("\n## cold start in a black hole, the node profile's cache (110 pods, %d Services and EndpointSlices, namespaces, the node; %.1f MiB on disk)\n", o.services, float64(cacheBytes)/(1<<20))
	fmt.Printf("cold_start_black_hole_to_first_cached_list\t%s\tgoal ≤ 0.1 s\t(exec to the first answer to kubelet's pod list, protobuf, asked every ms; 5 starts)\n", durs(walls))
	fmt.Printf("cold_start_hub_cpu_to_first_cached_list\t%s\t\t(the hub's CPU time, all threads, at that answer)\n", durs(cpus))
	return nil
}

// coldStarts starts a hub five times with the cloud black-holed (start(true): on the cache the
// hubs before it filled) and returns, for each, the time from exec to its first answer to path
// and its CPU time by then.
func coldStarts(relay *harness.Relay, start func(noWait bool) (*harness.Hub, error), path string) (walls, cpus []time.Duration, err error) {
	for i := 0; i < 5; i++ {
		if err := relay.BlackHole(); err != nil {
			return nil, nil, err
		}
		t0 := time.Now()
		h, err := start(true)
		if err != nil {
			return nil, nil, err
		}
		wall, cpu := firstAnswer(h, h.ProxyURL+path, t0)
		h.Stop()
		if wall == 0 {
			return nil, nil, fmt.Errorf("hub started in a black hole never answered from its cache")
		}
		walls, cpus = append(walls, wall), append(cpus, cpu)
		if err := relay.Pass(); err != nil {
			return nil, nil, err
		}
	}
	return walls, cpus, nil
}

// firstAnswer asks url every millisecond until the hub answers it (at most 10 s) and returns the
// time since t0 and the hub's CPU time then (0, 0 without an answer).
func firstAnswer(h *harness.Hub, url string, t0 time.Time) (time.Duration, time.Duration) {
	cl := &http.Client{Timeout: 5 * time.Second}
	for time.Since(t0) < 10*time.Second {
		if _, err := timeGet(cl, url); err == nil {
			wall := time.Since(t0)
			return wall, threadsCPU(h.Pid())
		}
		time.Sleep(time.Millisecond)
	}
	return 0, 0
}

// threadsCPU is the CPU time of every thread of a process, in nanoseconds (the first field of
// each /proc/<pid>/task/<tid>/schedstat): /proc/<pid>/stat counts in 10 ms ticks.
func threadsCPU(pid int) time.Duration {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	var ns int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			ns += n
		}
	}
	return time.Duration(ns)
}

// dirBytes is the size of the files under dir.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n
}
