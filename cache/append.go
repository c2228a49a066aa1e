package cache

import (
	"fmt"
)

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
				m := listMetaPayload(make([]byte, frameLen, 128), l.s.owners.name(k.owner), l.s.now(), k.listScope, ls.rec.ResourceVersion, false)
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
	if !ok || pn != n-frameLen || recordSum(sg.seed, buf[frameLen:]) != be32(buf[8:]) {
		return payload{}, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	p, err := decodePayload(buf[frameLen:])
	if err != nil || p.typ != recPut {
		return payload{}, fmt.Errorf("%w: not an object record", ErrCorrupt)
	}
	return p, nil
}
