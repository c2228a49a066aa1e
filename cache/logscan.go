package cache

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
)

// readHeader reads the file header of a version 1 or 2 log. A new log, or one whose header a
// crash tore before any record, is started instead (started: there is nothing to read).
func (l *logFile) readHeader(size int64) (started bool, err error) {
	f := l.seg.f
	var head [logHeaderLen]byte
	hn, _ := f.ReadAt(head[:], 0)
	magic := hn >= len(logMagic)+1 && string(head[:len(logMagic)]) == logMagic
	switch {
	case magic && head[len(logMagic)] == logV1:
		l.seg.hdr = int64(len(logMagic) + 1) // a version 1 log: read as it is, rewritten by open
		return false, nil
	case magic && hn == logHeaderLen && head[len(logMagic)] == logV2:
		l.seg.hdr, l.seg.seed = logHeaderLen, saltSeed(head[len(logMagic)+1:])
		return false, nil
	case size < logHeaderLen && (hn < len(logMagic)+1 || magic && head[len(logMagic)] == logV2):
		// New, or its header torn by a crash before any record: start it.
		h, seed := newLogHeader()
		l.seg.hdr, l.seg.seed = logHeaderLen, seed
		if !l.d.readOnly.Load() {
			err := f.Truncate(0)
			if err == nil {
				_, err = f.WriteAt(h, 0)
			}
			if err != nil { // a full disk: the next write tries again
				l.d.failed(err)
				return true, fmt.Errorf("cache: start %s: %w", l.path(), err)
			}
			l.unsynced = true // a new log: it and its directory entry are synced with its first records
			l.d.unsyncedDir(logDir)
		}
		l.setEnd(logHeaderLen)
		return true, nil
	}
	return false, fmt.Errorf("%w: %s is not a nodehub log", ErrCorrupt, l.path())
}

// scan calls apply with the payload of every whole record, from the file header to size, whose
// frame and checksum hold, while apply takes it (a payload apply refuses is corruption). A bad
// region followed by a chain of valid records that reaches the end of the file is skipped (lost),
// kept in .quarantine and counted; anything else is a torn tail, cut off (when writable). It
// returns where the records end.
func (l *logFile) scan(size int64, apply func(off int64, n uint32, payload []byte) bool) (end int64, lost bool) {
	f := l.seg.f
	br := bufio.NewReaderSize(io.NewSectionReader(f, 0, size), 64<<10)
	_, _ = br.Discard(int(l.seg.hdr))
	pos := l.seg.hdr
	var fr [frameLen]byte
	var buf []byte
	var rz *resyncer // made at the first fault, for every resync of the scan
	for pos < size {
		ok := false
		if _, err := io.ReadFull(br, fr[:]); err == nil {
			if n, good := checkFrame(fr[:]); good && pos+frameLen+int64(n) <= size {
				if cap(buf) < int(n) {
					buf = make([]byte, n)
				}
				buf = buf[:n]
				if _, err := io.ReadFull(br, buf); err == nil && recordSum(l.seg.seed, buf) == binary.BigEndian.Uint32(fr[8:]) {
					if apply(pos, frameLen+n, buf) {
						pos += frameLen + int64(n)
						ok = true
					}
				}
			}
		}
		if ok {
			continue
		}
		if rz == nil {
			rz = l.newResyncer(pos+1, size, resyncBatch)
		}
		next, taken := rz.resync(pos + 1)
		if next < 0 { // a torn tail: the writes of the last interval a crash cut short
			l.d.log.Info("cache: cut a torn tail off a log", "log", l.name, "at", pos, "bytes", size-pos)
			if taken {
				// Valid records in what is cut that do not chain to the end: kept for a look. What
				// remains is a prefix of what was written, a consistent older state.
				l.d.quarantineBytes(l.name, f, pos, size)
			}
			if !l.d.readOnly.Load() {
				if err := f.Truncate(pos); err != nil {
					l.d.failed(err)
				}
			}
			return pos, lost
		}
		l.d.log.Warn("cache: skipped a corrupt region of a log; its lists are incomplete until listed again", "log", l.name, "at", pos, "bytes", next-pos)
		l.d.quarantineBytes(l.name, f, pos, next)
		l.d.corrupt.Add(1)
		lost = true
		pos = next
		br.Reset(io.NewSectionReader(f, pos, size-pos))
	}
	return size, lost
}
