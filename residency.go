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
//   - when start-up has settled, the pages of the binary's read-only segments that start-up
//     touched (every package's init, k8s.io/api's tables — with the kernel mapping 64 KiB around
//     each page it faults in) are dropped from the resident set, and again every 30 s: what the
//     hub's periodic work faults in between is less than what accumulates over minutes (measured,
//     a plain idle hub: at most 11.6 MiB RSS from 60 to 120 s instead of 12.2–12.5; docs/figures.md);
//   - every few seconds, when the Go heap holds more than a MiB of free pages (after a burst: a big
//     list, many watches starting), they are returned to the kernel at once rather than over
//     minutes by the runtime's background scavenger.
const (
	startupSettle = 15 * time.Second
	trimEvery     = 5 * time.Second
	trimAbove     = 1 << 20
	// imageTrimEvery: how often the binary's pages are dropped again. Those still in use come back
	// at their next touch from the page cache (a minor fault; nothing is read from flash).
	imageTrimEvery = 30 * time.Second
)

// giveBackMemory runs until ctx ends.
func giveBackMemory(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(trimEvery)
	defer t.Stop()
	image := time.NewTimer(startupSettle)
	defer image.Stop()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
	settled := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-image.C:
			if !settled {
				settled = true
				debug.FreeOSMemory()
			}
			image.Reset(imageTrimEvery)
			if n, err := unmapReadOnlyImage(); err != nil {
				log.Debug("the binary's pages not dropped", "err", err)
			} else {
				log.Debug("the binary's pages dropped from the resident set", "bytes", n)
			}
		case <-t.C:
			metrics.Read(sample)
			if sample[0].Value.Kind() == metrics.KindUint64 && sample[0].Value.Uint64() > trimAbove {
				debug.FreeOSMemory()
			}
		}
	}
}

// unmapReadOnlyImage applies MADV_DONTNEED to every non-writable mapping of the executable and
// returns how many bytes of address space it covered. On a read-only file mapping that only drops
// this process's page-table entries: the pages stay in the page cache (nothing is re-read from
// flash unless the kernel needed the memory anyway) and those still in use come back on their next
// touch. Writable segments are never touched. The mappings are found first and dropped together
// at the end, with raw system calls: what runs after the first drop faults its pages back in (the
// kernel maps the 64 KiB around each faulting page), and reading /proc/self/maps in between
// brought back 1.5 MiB at once.
func unmapReadOnlyImage() (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	var spans [8][2]uintptr // a Go binary maps text and read-only data: two, or a few more
	n := 0
	for line := range strings.Lines(string(maps)) {
		// "start-end perms offset dev inode path"
		fields := strings.Fields(line)
		if len(fields) < 6 || fields[5] != exe || strings.IndexByte(fields[1], 'w') >= 0 || n == len(spans) {
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
		spans[n] = [2]uintptr{uintptr(start), uintptr(end - start)}
		n++
	}
	var total int64
	for _, sp := range spans[:n] {
		if _, _, errno := unix.RawSyscall(unix.SYS_MADVISE, sp[0], sp[1], unix.MADV_DONTNEED); errno != 0 {
			return total, errno
		}
		total += int64(sp[1])
	}
	return total, nil
}
