package cache

import (
	"encoding/json"
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

// compact rewrites the log with only its live records, then moves the index over to the new
// file. Callers hold l.mu.
func (l *rlog) compact() error {
	if err := l.s.writable(); err != nil {
		return err
	}
	c := liveCopy{recs: map[*rec]moved{}, refs: map[*hold]uint32{}, lists: map[listKey]uint32{}}
	if err := l.rewrite(func(emit emitFunc) error { return l.copyLive(&c, emit) }); err != nil {
		return err
	}
	l.reindex(&c)
	return nil
}

// moved is where compaction wrote a put record (off -1: it could not be read, and is gone).
type moved struct {
	off int64
	n   uint32
}

// liveCopy is what compaction wrote of the index: each put record's new place, each ref record's
// and each list record's new length, and whether an object could not be read (it is lost).
type liveCopy struct {
	recs  map[*rec]moved
	refs  map[*hold]uint32
	lists map[listKey]uint32
	lost  bool
}

// copyLive emits every record the index still needs: each object's put once, a ref for every
// other owner holding the same bytes, and each list as one list record (its listmeta folded in).
func (l *rlog) copyLive(c *liveCopy, emit emitFunc) error {
	for key, sl := range l.objs {
		ns, name := splitID(key)
		for i := range sl.holds {
			h := &sl.holds[i]
			mv, done := c.recs[h.r]
			if !done {
				p, err := readRec(l.seg, h.r.off, h.r.n)
				if err != nil {
					c.lost = true
					c.recs[h.r] = moved{off: -1}
					continue
				}
				np := putPayload(nil, l.s.owners.name(h.owner), p.at, ns, name, p.header, p.flags, p.body)
				off, n, err := emit(np)
				if err != nil {
					return err
				}
				c.recs[h.r] = moved{off, n}
				continue
			}
			if mv.off < 0 {
				continue
			}
			_, n, err := emit(refPayload(nil, l.s.owners.name(h.owner), h.r.at, ns, name, mv.off))
			if err != nil {
				return err
			}
			c.refs[h] = n
		}
	}
	for k, ls := range l.lists {
		js, err := json.Marshal(ls.rec)
		if err != nil {
			return err
		}
		_, n, err := emit(listPayload(nil, l.s.owners.name(k.owner), l.s.now(), k.listScope, js))
		if err != nil {
			return err
		}
		c.lists[k] = n
	}
	return nil
}

// reindex moves the index over to the rewritten file: the records' new places and lengths, the
// live bytes counted again, the objects that could not be read dropped (and the lists then
// incomplete).
func (l *rlog) reindex(c *liveCopy) {
	l.addLive(-l.live)
	for _, sl := range l.objs {
		for i := range sl.holds {
			sl.holds[i].refN = 0
		}
	}
	for h, n := range c.refs {
		h.refN = n
		l.addLive(int64(n))
	}
	for key, sl := range l.objs {
		kept := sl.holds[:0]
		for i := range sl.holds {
			h := sl.holds[i]
			if mv := c.recs[h.r]; mv.off < 0 {
				continue
			}
			kept = append(kept, h)
		}
		sl.holds = kept
		if len(kept) == 0 {
			delete(l.objs, key)
		}
	}
	for r, mv := range c.recs {
		if mv.off >= 0 {
			r.off, r.n = mv.off, mv.n
			l.addLive(int64(mv.n))
		}
	}
	for k, n := range c.lists {
		l.lists[k].n, l.lists[k].metaN = n, 0
		l.addLive(int64(n))
	}
	if c.lost {
		l.lose()
	}
}
