package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mappingRssKiB is the resident size of the mapping of this process that starts at addr, from
// /proc/self/smaps (a walk of the page tables: exact, unlike /proc/self/status).
func mappingRssKiB(t *testing.T, addr uintptr) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skip(err)
	}
	prefix := fmt.Sprintf("%x-", addr)
	in := false
	for line := range strings.Lines(string(b)) {
		if !strings.HasPrefix(line, " ") && strings.Contains(strings.Fields(line)[0], "-") {
			in = strings.HasPrefix(line, prefix)
			continue
		}
		if rest, ok := strings.CutPrefix(line, "Rss:"); ok && in {
			n, err := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no mapping at %#x in /proc/self/smaps", addr)
	return 0
}

// A page of a mapping faultPageByPage registered faults in alone: the kernel maps no 64 KiB around
// it (fault-around), so a burst that runs a little of many functions keeps only what it ran.
// The mapping here is the test binary, private and read-only, as the kernel maps a binary's text:
// one byte read every 256 KiB.
func TestFaultPageByPageMapsOnlyThePageTouched(t *testing.T) {
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	size := int(st.Size()) &^ (os.Getpagesize() - 1)
	m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	addr := uintptr(unsafe.Pointer(&m[0]))
	fd, err := faultPageByPage([][2]uintptr{{addr, uintptr(len(m))}})
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPERM) {
		t.Skipf("this kernel cannot turn fault-around off: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	const step = 256 << 10
	var sum byte
	touched := 0
	for off := step + 123; off < len(m); off += step {
		sum += m[off]
		touched++
	}
	rss := mappingRssKiB(t, addr)
	t.Logf("%d pages touched, %d KiB resident (sum %d)", touched, rss, sum)
	if page := int64(os.Getpagesize() / 1024); rss > int64(touched)*page {
		t.Fatalf("%d KiB resident for %d pages touched of %d KiB: faulted around", rss, touched, page)
	}
}

// The hub turns fault-around off for its binary's read-only segments and, at once, drops what
// start-up faulted in 64 KiB at a time (package inits, the flags, the hub's assembly): what it
// runs afterwards comes back page by page.
func TestImagePageByPageDropsWhatStartUpFaultedIn(t *testing.T) {
	before := rssFileKiB(t)
	undo, err := imagePageByPage()
	if undo != nil {
		defer undo()
	}
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPERM) {
		t.Skipf("this kernel cannot turn fault-around off: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	after := rssFileKiB(t)
	t.Logf("RssFile %d -> %d KiB", before, after)
	if after >= before {
		t.Fatalf("RssFile %d KiB after fault-around was turned off, %d before: start-up's pages kept", after, before)
	}
}
