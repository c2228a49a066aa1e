package hub

import (
	"fmt"
	"io"
	"net/http"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"time"
)

// servePprof is /debug/pprof/ (with --profiling): the CPU profile and the runtime's named profiles
// (heap, allocs, goroutine, block, mutex, threadcreate), in the format go tool pprof reads. It is
// written on runtime/pprof directly: net/http/pprof would add half a megabyte to the binary.
func servePprof(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/debug/pprof/")
	debug, _ := strconv.Atoi(r.URL.Query().Get("debug"))
	switch name {
	case "":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "profile?seconds=N\ntrace?seconds=N")
		for _, p := range pprof.Profiles() {
			fmt.Fprintf(w, "%s (%d)\n", p.Name(), p.Count())
		}
	case "trace": // the runtime's execution trace (go tool trace): every goroutine's wake-ups
		record(w, r, 1, trace.Start, trace.Stop)
	case "profile":
		record(w, r, 30, pprof.StartCPUProfile, pprof.StopCPUProfile)
	default:
		p := pprof.Lookup(name)
		if p == nil {
			http.NotFound(w, r)
			return
		}
		if debug > 0 {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		} else {
			w.Header().Set("Content-Type", "application/octet-stream")
		}
		_ = p.WriteTo(w, debug)
	}
}

// record writes what start records into w for the request's ?seconds=N (def when absent or out
// of 1–60 s), or until the client goes away.
func record(w http.ResponseWriter, r *http.Request, def int, start func(io.Writer) error, stop func()) {
	sec, err := strconv.Atoi(r.URL.Query().Get("seconds"))
	if err != nil || sec <= 0 || sec > 60 {
		sec = def
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	if err := start(w); err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	defer stop()
	select {
	case <-time.After(time.Duration(sec) * time.Second):
	case <-r.Context().Done():
	}
}
