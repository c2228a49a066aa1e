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

// writeRaw appends one record (rb: frameLen bytes of room for the frame, then the payload) and
// applies it. A record that does not decode is not written; a failed write loses what it held.
func (l *rlog) writeRaw(rb []byte, target *rec) error {
	dec, err := decodePayload(rb[frameLen:])
	if err != nil {
		return fmt.Errorf("cache: encode %s: %w", l.name, err)
	}
	off, err := l.appendRecord(rb)
	if err != nil {
		l.lose()
		return err
	}
	l.apply(off, uint32(len(rb)), dec, target)
	return nil
}

// readRec reads and checks the put record at off from a segment.
func readRec(sg *segment, off int64, n uint32) (payload, error) {
	b, err := sg.read(off, n)
	if err != nil {
		return payload{}, err
	}
	p, err := decodePayload(b)
	if err != nil || p.typ != recPut {
		return payload{}, fmt.Errorf("%w: not an object record", ErrCorrupt)
	}
	return p, nil
}
