package main

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
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
	g := giver{allocs: readHeap().allocs}
	var sink [][]byte
	for i := 0; i < 4096; i++ { // 4 MiB, dropped at once
		sink = append(sink, make([]byte, 1024))
	}
	sink = nil
	before := readHeap()
	if g.quiet(before.allocs) {
		t.Fatal("a busy tick counted as quiet")
	}
	if h := readHeap(); h.objects < before.objects {
		t.Fatalf("a busy tick collected the heap: %d bytes of objects, %d before", h.objects, before.objects)
	}
	if !g.quiet(readHeap().allocs) {
		t.Fatal("a quiet tick after the burst did not count as quiet")
	}
	if h := readHeap(); h.objects > h.live+trimAbove {
		t.Fatalf("the quiet tick after the burst left its garbage: %+v", h)
	}
	_ = sink
}
