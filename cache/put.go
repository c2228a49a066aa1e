package cache

import (
	"fmt"
	"hash/crc32"
)

// Put writes an object. Identical bytes another owner already stored for the same version are not
// written again (a small ref record says this owner holds them too). An offline change (Header.Local)
// past its owner's quota first pushes out that owner's oldest offline changes of the resource, and
// fails with ErrFull when that is not enough.
func (s *Store) Put(k Key, h *Header, body []byte) error {
	if err := k.validate(); err != nil {
		return err
	}
	if len(body) > maxBody {
		return fmt.Errorf("cache: put %s: body of %d bytes: %w", k.Path(), len(body), ErrFull)
	}
	l, err := s.logFor(k.Resource, true)
	if err != nil {
		return fmt.Errorf("cache: put %s: %w", k.Path(), err)
	}
	owner := s.owners.id(k.Owner)
	sc := getScratch()
	defer putScratch(sc)
	sc.plain = h.appendTo(sc.plain[:0])
	if len(sc.plain) > maxHeader {
		if !h.Local { // a newer version of the object is not kept: no list holding it is whole
			l.mu.Lock()
			l.lose()
			l.mu.Unlock()
		}
		return fmt.Errorf("cache: put %s: header of %d bytes: %w", k.Path(), len(sc.plain), ErrFull)
	}
	hlen := len(sc.plain)
	hfield, flags, stored := storedForm(sc, sc.plain, body)
	sum := crc32.Update(crc32.Checksum(hfield, crcTable), crcTable, stored)
	l.mu.Lock()
	defer l.mu.Unlock()
	if h.Local && l.unchanged(owner, k.ID(), h.ResourceVersion, sum, hfield, stored, sc.plain[:hlen], body) {
		return nil // nothing to write: flash wears by the bytes written
	}
	err = l.put(owner, k, h, sum, hfield, flags, stored)
	if err == nil && l.compactDue() {
		if cerr := l.compact(); cerr != nil {
			s.log.Warn("cache: compaction failed", "log", l.name, "err", cerr)
		}
	}
	return err
}

// put appends an owner's record of an object in its stored form (hfield, flags, stored; sum their
// checksum): a ref when another owner holds the same bytes of the same version, else the put, an
// offline change within its quota. Callers hold l.mu.
func (l *rlog) put(owner int32, k Key, h *Header, sum uint32, hfield []byte, flags byte, stored []byte) error {
	key := k.ID()
	if !h.Local {
		if r := l.shared(key, h.ResourceVersion, sum, hfield, stored); r != nil {
			if l.get(owner, key) == r {
				return nil // already held
			}
			l.buf = refPayload(l.room(), k.Owner, l.s.now(), k.Namespace, k.Name, r.off)
			return l.write(l.buf, r)
		}
	} else if err := l.admit(owner, k, int64(len(hfield)+len(stored)+frameLen+64)); err != nil {
		return err
	}
	l.buf = putPayload(l.room(), k.Owner, l.s.now(), k.Namespace, k.Name, hfield, flags, stored)
	// The index learns the record's version and checksum from here, not by decoding it again.
	err := l.write(l.buf, &rec{rv: h.ResourceVersion, local: h.Local, sum: sum})
	if cap(l.buf) > 64<<10 {
		l.buf = nil // a large object's buffer goes
	}
	return err
}

// shared finds a record of key another owner holds with the same version and stored bytes.
func (l *rlog) shared(key, rv string, sum uint32, hfield, stored []byte) *rec {
	sl := l.objs[key]
	if sl == nil || rv == "" {
		return nil
	}
	for _, h := range sl.holds {
		r := h.r
		if r.local || r.sum != sum || r.rv != rv {
			continue
		}
		p, err := readRec(l.seg, r.off, r.n)
		if err == nil && string(p.header) == string(hfield) && string(p.body) == string(stored) {
			return r
		}
	}
	return nil
}

// Delete removes an object; a missing one is not an error.
func (s *Store) Delete(k Key) error {
	if err := k.validate(); err != nil {
		return err
	}
	l, err := s.logFor(k.Resource, false)
	if l == nil || err != nil {
		return err
	}
	owner, ok := s.owners.lookup(k.Owner)
	if !ok {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.get(owner, k.ID()) == nil {
		return nil
	}
	l.buf = delPayload(l.room(), k.Owner, l.s.now(), k.Namespace, k.Name)
	return l.write(l.buf, nil)
}
