package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"time"

	"nodehub/e2e/harness"
)

// benchHostileFlash measures the flash a hostile pod wears offline (issue 28: one pod re-creating
// one 2.9 MB event for 30 s wrote 686 MiB): with its ServiceAccount's accepted token (hdr) the pod
// re-creates one event of incompressible text in a loop for 30 s, the 2.9 MB one, then one
// of 100 KiB (within the budget's burst). Flash is the hub's own count of the bytes it wrote to the
// cache's files (appended and compacted) and its block writes (/proc/<pid>/io write_bytes, 0 on a
// tmpfs), per minute. The hub must be offline.
func benchHostileFlash(h *harness.Hub, do func(method, url, body string, hdr map[string]string) (int, int64), hdr map[string]string) {
	const span = 30 * time.Second
	fmt.Printf("\n## hostile pod offline: flash written while it re-creates one event for %v (default flags)\n", span)
	fmt.Println("event\tcreates (answers)\tcache bytes written a minute (appended + compacted)\tblock writes a minute")
	fileBytes := func() float64 {
		a, _ := h.Metric("nodehub_cache_written_bytes_total")
		c, _ := h.Metric("nodehub_cache_compaction_written_bytes_total")
		return a + c
	}
	for _, size := range []int{2_900_000, 100 << 10} {
		b := make([]byte, size/2)
		_, _ = rand.Read(b)
		ev := fmt.Sprintf(`{"apiVersion":"v1","kind":"Event","metadata":{"name":"wear-%d","namespace":"default"},"involvedObject":{"kind":"Pod","name":"x","namespace":"default"},"reason":"Wear","message":"%s"}`, size, hex.EncodeToString(b))
		f0 := fileBytes()
		d0, _ := diskWriteBytes(h.Pid())
		codes, n := map[int]int{}, 0
		t0 := time.Now()
		for time.Since(t0) < span {
			code, _ := do(http.MethodPost, h.ProxyURL+"/api/v1/namespaces/default/events", ev, hdr)
			codes[code]++
			n++
		}
		took := time.Since(t0).Minutes()
		d1, _ := diskWriteBytes(h.Pid())
		fmt.Printf("%.1f MB\t%d %v\t%.2f MiB\t%.2f MiB\n", float64(size)/1e6, n, codes, (fileBytes()-f0)/took/(1<<20), float64(d1-d0)/took/(1<<20))
	}
}
