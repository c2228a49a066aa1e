package cache

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
)

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
				np := putPayload(nil, l.s.owners.name(h.owner), p.at, ns, name, p.header, p.flags, p.body)
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
			_, n, err := emit(refPayload(nil, l.s.owners.name(h.owner), h.r.at, ns, name, mv.off))
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
		_, n, err := emit(listPayload(nil, l.s.owners.name(k.owner), l.s.now(), k.listScope, js))
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
