package main

import (
	"context"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Memory the hub holds but no longer uses is given back to the node, whose pods need it more:
//   - when start-up has settled, and then at a quiet tick when they grew, the pages of the
//     binary's read-only segments are dropped from the resident set: what start-up touched (every
//     package's init, k8s.io/api's tables), and what a burst touched (the node's clients' first
//     lists run code that idle watches never do). Where the kernel allows it, those segments are
//     first registered so that each fault maps its own page alone (faultaround.go); elsewhere
//     the kernel maps the 64 KiB around each page it faults in (a burst left 10.6 of the binary's
//     13 MiB resident; page by page, 5.1). What stays in use comes back at its next touch from the
//     page cache: a minor fault, nothing read from flash.
//     They are dropped only when more than imageRegrowth of them came back since the last quiet
//     tick and a busy tick came in between (a burst), or more than imageCreep since the working
//     set that followed the last drop (measured at the first quiet tick after it): a hub that runs
//     the same code all along — idle, or a steady churn of events — would only fault the same
//     pages back in every tick, which cost the churn of the node profile ~7 % of its CPU;
//   - every few seconds, when the Go heap holds more than a MiB of free pages, or more than a MiB
//     of garbage beyond what the last collection found live (a burst's leftovers: the heap grows
//     to twice the live heap before the collector runs, and an idle hub never reaches that), it
//     is collected and its free pages are returned to the kernel at once rather than over minutes
//     by the runtime's background scavenger.
//
// Both are done only at a quiet tick: less than a MiB allocated over 5 s (quietBelow per
// trimEvery). A busy hub always holds garbage (its heap grows to twice the live heap between
// collections) and touches its code again at once: trimming it then would force a collection and
// re-fault the binary's pages every tick. After a busy tick the next comes a second later
// (recheckAfter, twice, then trimEvery again), so a burst's leftovers are given back within a
// second or two of its end, not up to ten.
const (
	startupSettle = 15 * time.Second
	trimEvery     = 5 * time.Second
	recheckAfter  = time.Second
	trimAbove     = 1 << 20
	quietBelow    = 1 << 20 // bytes allocated over trimEvery by a quiet hub
	imageRegrowth = 1 << 20 // bytes of the binary's pages come back since the last quiet tick
	imageCreep    = 4 << 20 // bytes of the binary's pages come back past the working set
)

// giveBackMemory runs until ctx ends.
func giveBackMemory(ctx context.Context, log *slog.Logger) {
	t := time.NewTimer(trimEvery)
	defer t.Stop()
	settled := time.NewTimer(startupSettle)
	defer settled.Stop()
	g := newGiver(readHeap().allocs, time.Now())
	undo, err := imagePageByPage()
	if undo != nil {
		defer undo()
	}
	if err != nil {
		log.Debug("the binary's pages: fault-around left on, or start-up's pages kept", "err", err)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-settled.C:
			g.image = true
			debug.FreeOSMemory()
			dropImage(log)
			g.dropped()
		case now := <-t.C:
			quiet := g.quiet(readHeap().allocs, now)
			if quiet && g.image && g.regrown(residentImage()) {
				dropImage(log)
				g.dropped()
			}
			t.Reset(g.next(quiet))
		}
	}
}

// giver decides, tick by tick, whether the hub is quiet enough to give memory back.
type giver struct {
	allocs uint64    // bytes allocated in all, at the last tick
	at     time.Time // the last tick
	busy   int       // busy ticks in a row
	burst  bool      // a busy tick came since the last quiet tick that looked at the image
	image  bool      // the binary's pages are dropped at quiet ticks once start-up has settled
	// base is the binary's resident bytes at the first quiet tick after the last drop (what the
	// hub's work faults back in), -1 until that tick; last is theirs at the last quiet tick.
	base, last int64
}

func newGiver(allocs uint64, now time.Time) giver {
	return giver{allocs: allocs, at: now, base: -1, last: -1}
}

// quiet takes the tick's count of bytes allocated in all and its time; when less than
// quietBelow per trimEvery was allocated since the last tick, it trims the heap (trimHeap) and
// reports true.
func (g *giver) quiet(allocs uint64, now time.Time) bool {
	elapsed := now.Sub(g.at)
	busy := float64(allocs-g.allocs)*float64(trimEvery) >= float64(quietBelow)*float64(max(elapsed, time.Millisecond))
	g.allocs, g.at = allocs, now
	if busy {
		g.busy++
		g.burst = true
		return false
	}
	g.busy = 0
	trimHeap()
	return true
}

// next is how long until the next tick: a second after one or two busy ticks in a row (a burst
// may just have ended), else trimEvery.
func (g *giver) next(quiet bool) time.Duration {
	if !quiet && g.busy%3 != 0 {
		return recheckAfter
	}
	return trimEvery
}

// regrown takes the binary's resident bytes at a quiet tick and reports whether they grew by more
// than imageRegrowth since the last quiet tick with a busy tick in between (a burst ran code the
// hub's steady work does not), or by more than imageCreep past the working set, which the first
// quiet tick after a drop measures. Faulted in page by page, the steady work's pages come back
// over tens of seconds after a drop (the collections' scans of the stacks read the function
// tables, a page at a time; heartbeats, bookmarks, syncs): measured against the working set of
// the first quiet tick, that growth passed imageRegrowth within 10 s, and the hub dropped its
// pages every 10 s, idle or not, and faulted them back (3.4 times the churn's page faults).
func (g *giver) regrown(resident int64) bool {
	if resident < 0 {
		return true // unknown: drop, as before the working set was measured
	}
	last, burst := g.last, g.burst
	g.last, g.burst = resident, false
	if g.base < 0 {
		g.base = resident
		return false
	}
	g.base = min(g.base, resident)
	return burst && resident > last+imageRegrowth || resident > g.base+imageCreep
}

// dropped records a drop of the binary's pages: the next quiet tick measures the working set.
func (g *giver) dropped() { g.base, g.last = -1, -1 }

// residentImage is the process's resident file-backed bytes (the "shared" field of
// /proc/self/statm: the binary's pages, the hub maps no other file), -1 when unknown.
func residentImage() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return -1
	}
	n, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return -1
	}
	return n * int64(os.Getpagesize())
}

// trimHeap collects the heap and returns its free pages when it holds more than trimAbove free,
// or more than trimAbove of garbage; it reports whether it did.
func trimHeap() bool {
	h := readHeap()
	if h.free > trimAbove || h.objects > h.live+trimAbove {
		debug.FreeOSMemory()
		return true
	}
	return false
}

// heap is what the runtime says of the Go heap.
type heap struct {
	free    uint64 // free pages not yet returned
	objects uint64 // objects, live and garbage
	live    uint64 // what the last collection found live
	allocs  uint64 // bytes allocated since the start
}

// readHeap reads the heap's figures.
func readHeap() heap {
	s := []metrics.Sample{
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/heap/allocs:bytes"},
	}
	metrics.Read(s)
	var v [4]uint64
	for i := range s {
		if s[i].Value.Kind() == metrics.KindUint64 {
			v[i] = s[i].Value.Uint64()
		}
	}
	return heap{free: v[0], objects: v[1], live: v[2], allocs: v[3]}
}

// dropImage drops the binary's read-only pages from the resident set.
func dropImage(log *slog.Logger) {
	if _, err := unmapReadOnlyImage(); err != nil {
		log.Debug("the binary's pages not dropped", "err", err)
	}
}

// unmapReadOnlyImage applies MADV_DONTNEED to every non-writable mapping of the executable and
// returns how many bytes of address space it covered. On a read-only file mapping that only drops
// this process's page-table entries: the pages stay in the page cache (nothing is re-read from
// flash unless the kernel needed the memory anyway) and those still in use come back on their next
// touch. Writable segments are never touched. The mappings are found first and dropped together
// at the end, with raw system calls: what runs after the first drop faults its pages back in (the
// kernel maps the 64 KiB around each faulting page unless faultPageByPage turned that off), and
// reading /proc/self/maps in between brought back 1.5 MiB at once.
func unmapReadOnlyImage() (int64, error) {
	spans, err := readOnlyImage()
	if err != nil {
		return 0, err
	}
	return dropSpans(spans)
}

// dropSpans applies MADV_DONTNEED to spans (start, length) and returns how many bytes of address
// space it covered.
func dropSpans(spans [][2]uintptr) (int64, error) {
	var total int64
	for _, sp := range spans {
		if _, _, errno := unix.RawSyscall(unix.SYS_MADVISE, sp[0], sp[1], unix.MADV_DONTNEED); errno != 0 {
			return total, errno
		}
		total += int64(sp[1])
	}
	return total, nil
}

// readOnlyImage is the executable's non-writable mappings (text, read-only data), each as its
// start and length.
func readOnlyImage() ([][2]uintptr, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return nil, err
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	spans := make([][2]uintptr, 0, 8) // a Go binary maps text and read-only data: two, or a few more
	for line := range strings.Lines(string(maps)) {
		// "start-end perms offset dev inode path"
		fields := strings.Fields(line)
		if len(fields) < 6 || fields[5] != exe || strings.IndexByte(fields[1], 'w') >= 0 || len(spans) == cap(spans) {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		spans = append(spans, [2]uintptr{uintptr(start), uintptr(end - start)})
	}
	return spans, nil
}
