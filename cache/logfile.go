package cache

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
)

// logFile is the log engine: one file of framed, checksummed records (frame.go) on the disk,
// appended to, read back, scanned at open (a torn tail cut, a corrupt region quarantined:
// logscan.go, resync.go) and rewritten whole (logrewrite.go). It knows a record as bytes: nothing of
// owners, objects or lists, which the rlog above it gives meaning. Its user serialises the calls
// (rlog.mu); a reader holds a segment, so a rewrite can swap the file under it.
type logFile struct {
	d    *disk
	name string // resource.version.group

	seg *segment
	end int64 // where the next record goes
	// unsynced: records were appended since the last Sync.
	unsynced bool
}

// segment is an open log file; readers hold a reference so compaction can swap files under them.
type segment struct {
	f    *os.File
	refs atomic.Int32
	seed uint32 // the checksum's seed from the file's salt (0: a version 1 log, unsalted)
	hdr  int64  // the file header's length
}

func (sg *segment) acquire() *segment { sg.refs.Add(1); return sg }
func (sg *segment) release() {
	if sg.refs.Add(-1) == 0 {
		sg.f.Close()
	}
}

// openFile opens the log's file, creating it when the disk is writable.
func (l *logFile) openFile() error {
	flag := os.O_RDWR | os.O_CREATE
	if l.d.readOnly.Load() {
		flag = os.O_RDONLY
	}
	f, err := l.d.root.OpenFile(l.path(), flag, 0o600)
	if err != nil && flag != os.O_RDONLY && isReadOnlyErr(err) {
		l.d.setReadOnly(err)
		f, err = l.d.root.OpenFile(l.path(), os.O_RDONLY, 0)
	}
	if err != nil {
		return fmt.Errorf("cache: open %s: %w", l.path(), err)
	}
	l.seg = &segment{f: f}
	l.seg.refs.Store(1)
	return nil
}

// fileSize is the size of the file as it is now.
func (l *logFile) fileSize() (int64, error) {
	fi, err := l.seg.f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// recordBytes is what the records take: the file but its header.
func (l *logFile) recordBytes() int64 { return l.end - l.seg.hdr }

// salted says whether the file is a version 2 log, its checksums keyed by its salt.
func (l *logFile) salted() bool { return l.seg.seed != 0 }

// close lets the file go once its readers are done.
func (l *logFile) close() {
	if l.seg != nil {
		l.seg.release()
		l.seg = nil
	}
}

func (l *logFile) path() string { return filepath.Join(logDir, l.name+logSuffix) }

// appendRecord writes one record at the end: rb is frameLen bytes of room for the frame, then the
// payload. A failed write is cut back off the file (a short write leaves no torn record behind
// valid ones). It returns where the record went.
func (l *logFile) appendRecord(rb []byte) (int64, error) {
	fillFrame(rb, l.seg.seed)
	var err error
	if l.d.hook != nil {
		err = l.d.hook(l.name)
	}
	if err == nil {
		_, err = l.seg.f.WriteAt(rb, l.end)
	}
	if err != nil {
		_ = l.seg.f.Truncate(l.end)
		l.d.failed(err)
		return 0, fmt.Errorf("cache: write %s: %w", l.name, err)
	}
	off := l.end
	l.setEnd(l.end + int64(len(rb)))
	l.unsynced = true
	l.d.markDirty()
	l.d.written.Add(int64(len(rb)))
	l.d.records.Add(1)
	return off, nil
}

// read reads and checks the record at off of n bytes (frame and payload) and returns its payload.
func (sg *segment) read(off int64, n uint32) ([]byte, error) {
	buf := make([]byte, n)
	if _, err := sg.f.ReadAt(buf, off); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	pn, ok := checkFrame(buf)
	if !ok || pn != n-frameLen || recordSum(sg.seed, buf[frameLen:]) != binary.BigEndian.Uint32(buf[8:]) {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	return buf[frameLen:], nil
}

// setEnd moves the end of the log and the store's file bytes.
func (l *logFile) setEnd(end int64) {
	l.d.fileBytes.Add(end - l.end)
	l.end = end
}
