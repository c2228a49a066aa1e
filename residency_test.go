package main

import (
	"os"
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
