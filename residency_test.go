package main

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"
)

func rssFileKiB(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "RssFile:"); ok {
			n, err := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Skip("no RssFile in /proc/self/status")
	return 0
}

// The binary's read-only pages leave the resident set, and the process runs on.
func TestUnmapReadOnlyImage(t *testing.T) {
	before := rssFileKiB(t)
	n, err := unmapReadOnlyImage()
	if err != nil {
		t.Fatal(err)
	}
	after := rssFileKiB(t)
	st, err := os.Stat("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	if n < st.Size()/2 {
		t.Errorf("dropped %d bytes of a %d-byte binary", n, st.Size())
	}
	if after >= before {
		t.Errorf("RssFile %d KiB after the drop, %d before", after, before)
	}
	t.Logf("RssFile %d -> %d KiB (%d bytes of mappings dropped)", before, after, n)
}

// A burst's garbage is collected and given back at the next tick, though the heap has not grown
// to where the collector would run by itself (it is off here: nothing else collects).
func TestTrimHeapCollectsABurstsGarbage(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	debug.FreeOSMemory()
	var sink [][]byte
	for i := 0; i < 4096; i++ { // 4 MiB, dropped at once
		sink = append(sink, make([]byte, 1024))
	}
	sink = nil
	if !trimHeap() {
		t.Fatal("4 MiB of garbage left in the heap")
	}
	if h := readHeap(); h.free > trimAbove || h.objects > h.live+trimAbove {
		t.Fatalf("after the trim: %+v", h)
	}
	if trimHeap() {
		t.Fatal("trimmed again with nothing to give back")
	}
	_ = sink
}

// A tick after a busy interval (a MiB or more allocated since the last) gives nothing back, though
// the heap holds garbage: a busy hub always does. The next quiet tick collects it.
func TestGiveBackOnlyWhenQuiet(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	debug.FreeOSMemory()
	start := time.Now()
	g := newGiver(readHeap().allocs, start)
	var sink [][]byte
	for i := 0; i < 4096; i++ { // 4 MiB, dropped at once
		sink = append(sink, make([]byte, 1024))
	}
	sink = nil
	before := readHeap()
	if g.quiet(before.allocs, start.Add(trimEvery)) {
		t.Fatal("a busy tick counted as quiet")
	}
	if h := readHeap(); h.objects < before.objects {
		t.Fatalf("a busy tick collected the heap: %d bytes of objects, %d before", h.objects, before.objects)
	}
	if !g.quiet(readHeap().allocs, start.Add(2*trimEvery)) {
		t.Fatal("a quiet tick after the burst did not count as quiet")
	}
	if h := readHeap(); h.objects > h.live+trimAbove {
		t.Fatalf("the quiet tick after the burst left its garbage: %+v", h)
	}
	_ = sink
}

// The binary's pages are dropped at a quiet tick only when more of them came back than the
// working set measured after the last drop: a hub running the same code all along (idle, a steady
// churn of events) keeps them, one whose burst touched more gives them back.
func TestImageDroppedOnlyWhenItGrew(t *testing.T) {
	const mib = 1 << 20
	g := newGiver(0, time.Now())
	steps := []struct {
		resident int64
		drop     bool
	}{
		{5 * mib, false},       // the first quiet tick after the drop at start-up: the working set
		{5*mib + mib/2, false}, // the same work, a few pages more
		{5 * mib, false},
		{11 * mib, true}, // a burst ran code the steady work does not
	}
	for i, s := range steps {
		g.burst = s.drop // the burst's busy ticks
		if got := g.regrown(s.resident); got != s.drop {
			t.Fatalf("tick %d, %d bytes resident: drop %v, want %v", i, s.resident, got, s.drop)
		}
	}
	g.dropped()
	if g.regrown(6 * mib) {
		t.Fatal("the first quiet tick after a drop dropped again: it measures the working set")
	}
	if g.regrown(6*mib + mib/2) {
		t.Fatal("dropped the working set that came back")
	}
	g.burst = true
	if !g.regrown(8 * mib) {
		t.Fatal("2 MiB past the working set kept")
	}
}

// Faulted in page by page, a steady hub's pages come back a few at a time over minutes (its rarer
// paths), and after a drop its working set comes back over tens of seconds: that growth is kept
// until it passes imageCreep; a burst's MiB between two quiet ticks, with a busy tick between
// them, is dropped at once.
func TestImageCreepKeptBurstDropped(t *testing.T) {
	const mib = 1 << 20
	g := newGiver(0, time.Now())
	resident := int64(mib) // the working set measured after a drop
	if g.regrown(resident) {
		t.Fatal("the first quiet tick after a drop dropped again")
	}
	for resident+mib/2 <= mib+imageCreep { // half a MiB more at each quiet tick
		resident += mib / 2
		if g.regrown(resident) {
			t.Fatalf("dropped at %d bytes, creeping from 1 MiB: the steady work's pages", resident)
		}
	}
	if !g.regrown(resident + mib/2) {
		t.Fatalf("kept %d bytes, more than imageCreep past the working set", resident+mib/2)
	}
	g.dropped()
	g.regrown(mib)
	if g.regrown(mib + mib + mib/2) {
		t.Fatal("1.5 MiB come back between two quiet ticks with no busy tick between (the working set faulted back) dropped")
	}
	g.quiet(8<<20, time.Now().Add(trimEvery)) // a burst's busy tick
	if !g.regrown(mib + 3*mib) {
		t.Fatal("a burst's 1.5 MiB between two quiet ticks kept")
	}
}

// A tick after a busy one comes a second later, twice, so a burst's leftovers go within a second
// or two of its end; a hub busy all along is looked at every trimEvery in between, and a quiet
// one every trimEvery. Quiet is a rate: less than quietBelow per trimEvery.
func TestBusyTicksLookAgainSoon(t *testing.T) {
	start := time.Now()
	g := newGiver(0, start)
	now, allocs := start, uint64(0)
	tick := func(alloc uint64, d time.Duration) (bool, time.Duration) {
		now, allocs = now.Add(d), allocs+alloc
		q := g.quiet(allocs, now)
		return q, g.next(q)
	}
	if q, next := tick(8<<20, trimEvery); q || next != recheckAfter {
		t.Fatalf("a burst's tick: quiet %v, next in %v", q, next)
	}
	if q, next := tick(quietBelow/2, recheckAfter); q || next != recheckAfter {
		t.Fatalf("half a MiB in a second: quiet %v, next in %v", q, next)
	}
	if q, next := tick(quietBelow/2, recheckAfter); q || next != trimEvery {
		t.Fatalf("a third busy tick: quiet %v, next in %v", q, next)
	}
	if q, next := tick(quietBelow/16, recheckAfter); !q || next != trimEvery {
		t.Fatalf("64 KiB in a second: quiet %v, next in %v", q, next)
	}
	if q, _ := tick(quietBelow/2, trimEvery); !q {
		t.Fatal("half a MiB over trimEvery counted busy")
	}
}
