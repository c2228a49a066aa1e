package cache

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// rlog is one resource's log (every owner's objects of one resource.version.group) and its index:
// where the record of each object each owner holds is, never the objects themselves.
type rlog struct {
	s    *Store
	name string // resource.version.group

	mu    sync.RWMutex
	seg   *segment
	end   int64 // where the next record goes
	live  int64 // bytes of records still needed (the rest is dead, reclaimed by compaction)
	objs  map[string]*slot
	lists map[listKey]*listState
	// metaDue: objects were lost (a failed write, corruption) and the lists, already incomplete in
	// memory, are not yet recorded so on disk: the next append records that first.
	metaDue bool
	// unopened: while loading, a put record whose object could not be opened was not applied.
	unopened bool
	// unsynced: records were appended since the last Sync.
	unsynced bool
	buf      []byte
	byOff    map[int64]*rec // while loading: put records by offset, for ref records
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

// rec is one put record: one version of one object, held by one or more owners.
type rec struct {
	off   int64
	n     uint32 // frame and payload
	at    uint32
	refs  int32
	local bool
	sum   uint32 // CRC-32C of header and body: identical bytes are stored once
	rv    string
}

// hold says that an owner holds a record (through its own put, or a ref record of refN bytes).
type hold struct {
	owner int32
	r     *rec
	refN  uint32
}

type slot struct{ holds []hold }

func (sl *slot) find(owner int32) int {
	return slices.IndexFunc(sl.holds, func(h hold) bool { return h.owner == owner })
}

type listKey struct {
	owner int32
	listScope
}

type listState struct {
	rec   ListRecord
	n     uint32 // the list record
	metaN uint32 // the newest listmeta record since
}

func (l *rlog) path() string { return filepath.Join(logDir, l.name+logSuffix) }

func newRlog(s *Store, name string) *rlog {
	return &rlog{s: s, name: name, objs: map[string]*slot{}, lists: map[listKey]*listState{}}
}

// open opens (creating it when writable) and loads the log file.
func (l *rlog) open() error {
	flag := os.O_RDWR | os.O_CREATE
	if l.s.readOnly.Load() {
		flag = os.O_RDONLY
	}
	f, err := l.s.root.OpenFile(l.path(), flag, 0o600)
	if err != nil && flag != os.O_RDONLY && isReadOnlyErr(err) {
		l.s.setReadOnly(err)
		f, err = l.s.root.OpenFile(l.path(), os.O_RDONLY, 0)
	}
	if err != nil {
		return fmt.Errorf("cache: open %s: %w", l.path(), err)
	}
	l.seg = &segment{f: f}
	l.seg.refs.Store(1)
	if err := l.load(); err != nil {
		return err
	}
	l.upgrade()
	return nil
}

// load reads every record, rebuilding the index. A torn tail is cut off (when writable); a bad
// region followed by good records is skipped and kept in .quarantine.
func (l *rlog) load() error {
	f := l.seg.f
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	var head [logHeaderLen]byte
	hn, _ := f.ReadAt(head[:], 0)
	if hn >= len(logMagic)+1 && string(head[:len(logMagic)]) == logMagic && head[len(logMagic)] == logV1 {
		l.seg.hdr = int64(len(logMagic) + 1) // a version 1 log: read as it is, rewritten by open
	} else if hn == logHeaderLen && string(head[:len(logMagic)]) == logMagic && head[len(logMagic)] == logV2 {
		l.seg.hdr, l.seg.seed = logHeaderLen, saltSeed(head[len(logMagic)+1:])
	} else if size < logHeaderLen && (hn < len(logMagic)+1 || string(head[:len(logMagic)]) == logMagic && head[len(logMagic)] == logV2) {
		// New, or its header torn by a crash before any record: start it.
		h, seed := newLogHeader()
		l.seg.hdr, l.seg.seed = logHeaderLen, seed
		if !l.s.readOnly.Load() {
			err := f.Truncate(0)
			if err == nil {
				_, err = f.WriteAt(h, 0)
			}
			if err != nil { // a full disk: the next write tries again
				l.s.failed(err)
				return fmt.Errorf("cache: start %s: %w", l.path(), err)
			}
			l.unsynced = true // a new log: it and its directory entry are synced with its first records
			l.s.unsyncedDir(logDir)
		}
		l.setEnd(logHeaderLen)
		return nil
	} else {
		return fmt.Errorf("%w: %s is not a nodehub log", ErrCorrupt, l.path())
	}
	l.byOff = map[int64]*rec{}
	defer func() { l.byOff = nil }()
	br := bufio.NewReaderSize(io.NewSectionReader(f, 0, size), 64<<10)
	_, _ = br.Discard(int(l.seg.hdr))
	pos := l.seg.hdr
	var fr [frameLen]byte
	var buf []byte
	lost := false
	l.unopened = false
	defer func() {
		if lost || l.unopened { // objects were lost: no list read back is whole, whenever it was recorded
			l.lose()
		}
	}()
	for pos < size {
		ok := false
		if _, err := io.ReadFull(br, fr[:]); err == nil {
			if n, good := checkFrame(fr[:]); good && pos+frameLen+int64(n) <= size {
				if cap(buf) < int(n) {
					buf = make([]byte, n)
				}
				buf = buf[:n]
				if _, err := io.ReadFull(br, buf); err == nil && recordSum(l.seg.seed, buf) == binary.BigEndian.Uint32(fr[8:]) {
					if p, err := decodePayload(buf); err == nil {
						l.apply(pos, frameLen+n, p, nil)
						pos += frameLen + int64(n)
						ok = true
					}
				}
			}
		}
		if ok {
			continue
		}
		next, taken := l.resync(pos+1, size)
		if next < 0 { // a torn tail: the writes of the last interval a crash cut short
			l.s.log.Info("cache: cut a torn tail off a log", "log", l.name, "at", pos, "bytes", size-pos)
			if taken {
				// Valid records in what is cut that do not chain to the end: kept for a look. What
				// remains is a prefix of what was written, a consistent older state.
				l.s.quarantineBytes(l.name, f, pos, size)
			}
			if !l.s.readOnly.Load() {
				if err := f.Truncate(pos); err != nil {
					l.s.failed(err)
				}
			}
			size = pos
			break
		}
		l.s.log.Warn("cache: skipped a corrupt region of a log; its lists are incomplete until listed again", "log", l.name, "at", pos, "bytes", next-pos)
		l.s.quarantineBytes(l.name, f, pos, next)
		l.s.corrupt.Add(1)
		lost = true
		pos = next
		br.Reset(io.NewSectionReader(f, pos, size-pos))
	}
	l.setEnd(size)
	return nil
}

// resync finds the next offset at or after from where a chain of whole, valid records starts
// that reaches the end of the file, or -1; skipped is set when valid records were passed over
// because their chain broke before the end. A record found in the middle of a bad region (an
// object's bytes may hold a frame) is taken only when all that follows it is records.
func (l *rlog) resync(from, size int64) (at int64, skipped bool) {
	f := l.seg.f
	chunk := make([]byte, 64<<10)
	for off := from; off < size; {
		n, _ := f.ReadAt(chunk, off)
		if n <= 0 {
			return -1, skipped
		}
		b := chunk[:n]
		moved := false
		for i := 0; i+4 <= len(b); {
			j := bytes.Index(b[i:], []byte(frameMagic))
			if j < 0 {
				break
			}
			at := off + int64(i+j)
			if end := l.chainEnd(at, size); end == size {
				return at, skipped
			} else if end > at {
				// Valid records up to end, then something else: not a resync point, nor is
				// anything inside that chain. Look on after it.
				skipped = true
				off, moved = end, true
				break
			}
			i += j + 1
		}
		if moved {
			continue
		}
		if n < len(chunk) {
			return -1, skipped
		}
		off += int64(n - 3)
	}
	return -1, skipped
}

// chainEnd follows valid records from at and returns where the chain ends (at: none valid).
func (l *rlog) chainEnd(at, size int64) int64 {
	for at < size {
		n, ok := l.validAt(at, size)
		if !ok {
			return at
		}
		at += frameLen + int64(n)
	}
	return at
}

// validAt reports whether a whole record with a good checksum starts at at, and its length.
func (l *rlog) validAt(at, size int64) (uint32, bool) {
	var fr [frameLen]byte
	if _, err := l.seg.f.ReadAt(fr[:], at); err != nil {
		return 0, false
	}
	n, ok := checkFrame(fr[:])
	if !ok || at+frameLen+int64(n) > size {
		return 0, false
	}
	buf := make([]byte, n)
	if _, err := l.seg.f.ReadAt(buf, at+frameLen); err != nil {
		return 0, false
	}
	return n, recordSum(l.seg.seed, buf) == binary.BigEndian.Uint32(fr[8:])
}

// lose records that objects were lost: every list of the resource is incomplete until it is
// listed again in full (the kubelet is never answered a partial pod list as if it were whole).
func (l *rlog) lose() {
	for _, ls := range l.lists {
		if ls.rec.Complete {
			ls.rec.Complete = false
			l.metaDue = true
		}
	}
}

// apply brings the index up to date with one record at off of n bytes. target, when not nil, is
// for a ref the record it points to (known when the hub writes it; looked up by offset when
// loading), and for a put the record as its writer knows it (resourceVersion, local, checksum),
// so the hub's own write is not decompressed and checksummed again to index it.
func (l *rlog) apply(off int64, n uint32, p payload, target *rec) {
	owner := l.s.ownerID(p.owner)
	if p.typ != recDel && p.typ != recDrop {
		l.s.touch(owner, p.at)
	}
	switch p.typ {
	case recPut:
		r := target
		if r == nil {
			hdr, err := p.openHeader()
			if err != nil {
				l.unopened = true // its object is lost: no list that held it is whole
				return
			}
			rv, local, ok := headerRV(hdr)
			if !ok {
				l.unopened = true
				return
			}
			r = &rec{local: local, rv: rv, sum: crc32.Update(crc32.Checksum(p.header, crcTable), crcTable, p.body)}
		}
		r.off, r.n, r.at, r.refs = off, n, p.at, 1
		l.addLive(int64(n))
		if r.local {
			l.s.addLocal(owner, int64(n))
		}
		if l.byOff != nil {
			l.byOff[off] = r
		}
		l.setHold(id(p.ns, p.name), hold{owner: owner, r: r})
	case recRef:
		if target == nil && l.byOff != nil {
			target = l.byOff[p.target]
		}
		if target == nil {
			return // its object was in a lost region (the lists are incomplete already)
		}
		target.refs++
		l.addLive(int64(n))
		l.setHold(id(p.ns, p.name), hold{owner: owner, r: target, refN: n})
	case recDel:
		if key := id(p.ns, p.name); l.delHold(key, owner) {
			l.forget(owner, key)
		}
	case recList:
		var lr ListRecord
		if json.Unmarshal(p.body, &lr) != nil {
			return
		}
		k := listKey{owner, listScope{p.ns, p.ls, p.fs}}
		if old := l.lists[k]; old != nil {
			l.addLive(-(int64(old.n + old.metaN)))
		}
		l.lists[k] = &listState{rec: lr, n: n}
		l.addLive(int64(n))
	case recListMeta:
		ls := l.lists[listKey{owner, listScope{p.ns, p.ls, p.fs}}]
		if ls == nil {
			return
		}
		ls.rec.ResourceVersion, ls.rec.Complete = p.rv, p.complete
		l.addLive(int64(n) - int64(ls.metaN))
		ls.metaN = n
	case recDrop:
		for k, sl := range l.objs {
			if i := sl.find(owner); i >= 0 {
				l.release(sl.holds[i])
				sl.holds = append(sl.holds[:i], sl.holds[i+1:]...)
				if len(sl.holds) == 0 {
					delete(l.objs, k)
				}
			}
		}
		for k, ls := range l.lists {
			if k.owner == owner {
				l.addLive(-(int64(ls.n + ls.metaN)))
				delete(l.lists, k)
			}
		}
	}
}

// forget takes a deleted object out of the keys of its owner's lists: a list's keys are then what
// it holds, so a key it names that is not held was lost (a write that failed), never deleted. The
// keys are replaced, not changed in place: readers may hold the old slice.
func (l *rlog) forget(owner int32, key string) {
	for k, ls := range l.lists {
		if k.owner != owner {
			continue
		}
		keys := ls.rec.Keys
		if i, ok := slices.BinarySearch(keys, key); ok {
			ls.rec.Keys = slices.Concat(keys[:i:i], keys[i+1:])
		}
	}
}

func (l *rlog) setHold(key string, h hold) {
	sl := l.objs[key]
	if sl == nil {
		sl = &slot{holds: make([]hold, 0, 1)}
		l.objs[key] = sl
	}
	if i := sl.find(h.owner); i >= 0 {
		l.release(sl.holds[i])
		sl.holds[i] = h
		return
	}
	sl.holds = append(sl.holds, h)
}

func (l *rlog) delHold(key string, owner int32) bool {
	sl := l.objs[key]
	if sl == nil {
		return false
	}
	i := sl.find(owner)
	if i < 0 {
		return false
	}
	l.release(sl.holds[i])
	sl.holds = append(sl.holds[:i], sl.holds[i+1:]...)
	if len(sl.holds) == 0 {
		delete(l.objs, key)
	}
	return true
}

func (l *rlog) release(h hold) {
	l.addLive(-(int64(h.refN)))
	h.r.refs--
	if h.r.refs == 0 {
		l.addLive(-(int64(h.r.n)))
		if h.r.local {
			l.s.addLocal(h.owner, -int64(h.r.n))
		}
	}
}

// get returns the record an owner holds for a key.
func (l *rlog) get(owner int32, key string) *rec {
	sl := l.objs[key]
	if sl == nil {
		return nil
	}
	if i := sl.find(owner); i >= 0 {
		return sl.holds[i].r
	}
	return nil
}

// write appends one record (frameLen bytes of room, then its payload, built in l.buf) and applies
// it. Callers hold l.mu.
func (l *rlog) write(p []byte, target *rec) error {
	if err := l.s.writable(); err != nil {
		return err
	}
	if l.metaDue {
		l.metaDue = false
		for k, ls := range l.lists {
			if !ls.rec.Complete {
				m := listMetaPayload(make([]byte, frameLen, 128), l.s.ownerName(k.owner), l.s.now(), k.listScope, ls.rec.ResourceVersion, false)
				if err := l.writeRaw(m, nil); err != nil {
					l.metaDue = true
					return err
				}
			}
		}
	}
	return l.writeRaw(p, target)
}

// writeRaw appends one record: rb is frameLen bytes of room for the frame, then the payload.
func (l *rlog) writeRaw(rb []byte, target *rec) error {
	dec, err := decodePayload(rb[frameLen:])
	if err != nil {
		return fmt.Errorf("cache: encode %s: %w", l.name, err)
	}
	fillFrame(rb, l.seg.seed)
	if l.s.hook != nil {
		err = l.s.hook(l.name)
	}
	if err == nil {
		_, err = l.seg.f.WriteAt(rb, l.end)
	}
	if err != nil {
		_ = l.seg.f.Truncate(l.end) // a short write leaves no torn record behind valid ones
		l.lose()
		l.s.failed(err)
		return fmt.Errorf("cache: write %s: %w", l.name, err)
	}
	off := l.end
	l.setEnd(l.end + int64(len(rb)))
	l.unsynced = true
	l.s.markDirty()
	l.s.written.Add(int64(len(rb)))
	l.s.records.Add(1)
	l.apply(off, uint32(len(rb)), dec, target)
	return nil
}

// readRec reads and checks the put record at off from a segment.
func readRec(sg *segment, off int64, n uint32) (payload, error) {
	buf := make([]byte, n)
	if _, err := sg.f.ReadAt(buf, off); err != nil {
		return payload{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	pn, ok := checkFrame(buf)
	if !ok || pn != n-frameLen || recordSum(sg.seed, buf[frameLen:]) != binary.BigEndian.Uint32(buf[8:]) {
		return payload{}, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	p, err := decodePayload(buf[frameLen:])
	if err != nil || p.typ != recPut {
		return payload{}, fmt.Errorf("%w: not an object record", ErrCorrupt)
	}
	return p, nil
}

// addLive moves the live bytes of the log and of the store.
func (l *rlog) addLive(n int64) {
	l.live += n
	l.s.liveBytes.Add(n)
}

// setEnd moves the end of the log and the store's file bytes.
func (l *rlog) setEnd(end int64) {
	l.s.fileBytes.Add(end - l.end)
	l.end = end
}

func (l *rlog) dead() int64 { return l.end - l.seg.hdr - l.live }

// compactDue says whether the dead bytes passed their bound: three times the live bytes and 1 MiB
// (so compaction writes at most a third of a byte per byte appended, and a log takes at most four
// times what it holds, plus 1 MiB), or a quarter of the live bytes once the cache's files are over
// --cache-max-bytes.
func (l *rlog) compactDue() bool {
	d := l.dead()
	if d >= 1<<20 && d >= 3*l.live {
		return true
	}
	m := l.s.maxBytes.Load()
	return m > 0 && l.s.fileBytes.Load() > m && d >= 64<<10 && d >= l.live/4
}

// compact rewrites the log with only its live records (a temporary file, fsynced, renamed over the
// old one, the directory fsynced), then swaps the index's offsets. Callers hold l.mu.
func (l *rlog) compact() error {
	if err := l.s.writable(); err != nil {
		return err
	}
	tmp := l.path() + ".compact"
	f, err := l.s.root.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		l.s.failed(err)
		return fmt.Errorf("cache: compact %s: %w", l.name, err)
	}
	fail := func(err error) error {
		f.Close()
		_ = l.s.root.Remove(tmp)
		l.s.failed(err)
		return fmt.Errorf("cache: compact %s: %w", l.name, err)
	}
	w := bufio.NewWriterSize(f, 64<<10)
	hdr, seed := newLogHeader() // a new salt for the new file
	pos := int64(len(hdr))
	_, _ = w.Write(hdr)
	type moved struct {
		off int64
		n   uint32
	}
	recs := map[*rec]moved{}
	refs := map[*hold]uint32{}
	var lost []*rec
	emit := func(p []byte) (int64, uint32, error) {
		rb := frame(p, seed)
		at := pos
		if _, err := w.Write(rb); err != nil {
			return 0, 0, err
		}
		pos += int64(len(rb))
		return at, uint32(len(rb)), nil
	}
	for key, sl := range l.objs {
		ns, name := splitID(key)
		for i := range sl.holds {
			h := &sl.holds[i]
			mv, done := recs[h.r]
			if !done {
				p, err := readRec(l.seg, h.r.off, h.r.n)
				if err != nil {
					lost = append(lost, h.r)
					recs[h.r] = moved{off: -1}
					continue
				}
				np := putPayload(nil, l.s.ownerName(h.owner), p.at, ns, name, p.header, p.flags, p.body)
				off, n, err := emit(np)
				if err != nil {
					return fail(err)
				}
				recs[h.r] = moved{off, n}
				continue
			}
			if mv.off < 0 {
				continue
			}
			_, n, err := emit(refPayload(nil, l.s.ownerName(h.owner), h.r.at, ns, name, mv.off))
			if err != nil {
				return fail(err)
			}
			refs[h] = n
		}
	}
	listN := map[listKey]uint32{}
	for k, ls := range l.lists {
		js, err := json.Marshal(ls.rec)
		if err != nil {
			return fail(err)
		}
		_, n, err := emit(listPayload(nil, l.s.ownerName(k.owner), l.s.now(), k.listScope, js))
		if err != nil {
			return fail(err)
		}
		listN[k] = n
	}
	if err := w.Flush(); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := l.s.root.Rename(tmp, l.path()); err != nil {
		return fail(err)
	}
	l.s.syncDir(logDir)
	// The new file is in place: move the index over to it.
	old := l.seg
	l.seg = &segment{f: f, seed: seed, hdr: int64(len(hdr))}
	l.seg.refs.Store(1)
	old.release()
	l.addLive(-l.live)
	for _, sl := range l.objs {
		for i := range sl.holds {
			sl.holds[i].refN = 0
		}
	}
	for h, n := range refs {
		h.refN = n
		l.addLive(int64(n))
	}
	for key, sl := range l.objs {
		kept := sl.holds[:0]
		for i := range sl.holds {
			h := sl.holds[i]
			if mv := recs[h.r]; mv.off < 0 {
				continue
			}
			kept = append(kept, h)
		}
		sl.holds = kept
		if len(kept) == 0 {
			delete(l.objs, key)
		}
	}
	for r, mv := range recs {
		if mv.off >= 0 {
			r.off, r.n = mv.off, mv.n
			l.addLive(int64(mv.n))
		}
	}
	for k, n := range listN {
		l.lists[k].n, l.lists[k].metaN = n, 0
		l.addLive(int64(n))
	}
	if len(lost) > 0 {
		l.lose()
	}
	written := pos - int64(len(hdr))
	l.setEnd(pos)
	l.s.compactions.Add(1)
	l.s.compacted.Add(written)
	l.s.log.Debug("cache: compacted a log", "log", l.name, "bytes", written)
	return nil
}

// now is the time records are stamped with (Unix seconds).
func (s *Store) now() uint32 {
	if s.clock != nil {
		return uint32(s.clock().Unix())
	}
	return uint32(time.Now().Unix())
}

// isReadOnlyErr reports whether err says the file system cannot be written (read-only, or a
// permission the process lacks).
func isReadOnlyErr(err error) bool {
	return errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM)
}

// logName is a resource's log name: resource.version.group.
func logName(r Resource) string {
	g := r.Group
	if g == "" {
		g = "core"
	}
	return r.Resource + "." + r.Version + "." + g
}

// parseLogName reverses logName.
func parseLogName(s string) (resource, version, group string, ok bool) {
	resource, rest, ok1 := strings.Cut(s, ".")
	version, group, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 {
		return "", "", "", false
	}
	if group == "core" {
		group = ""
	}
	return resource, version, group, resource != "" && version != ""
}

// room returns the log's record buffer, emptied, with room for a frame.
func (l *rlog) room() []byte {
	if cap(l.buf) < frameLen {
		l.buf = make([]byte, frameLen, 4096)
	}
	return l.buf[:frameLen]
}
