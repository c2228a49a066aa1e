package cache

// unchanged reports whether an owner's record of key already holds an offline change: the same
// body and header (but for the mark of an offline change, when the record is the cloud's). Then
// nothing is written: flash wears by the bytes written, and a client that repeats a write (a
// status update that changes nothing, a retry) would rewrite the object each time. The change is
// given as stored (hfield, stored, sum) and as plain bytes (hdr, body). An offline change of an
// object of the same version whose stored form has another checksum differs without a read;
// otherwise the record is read and compared. Callers hold l.mu.
func (l *rlog) unchanged(owner int32, key, rv string, sum uint32, hfield, stored, hdr, body []byte) bool {
	r := l.get(owner, key)
	if r == nil || r.rv != rv || r.local && r.sum != sum {
		return false
	}
	p, err := readRec(l.seg, r.off, r.n)
	if err != nil {
		return false
	}
	if r.local {
		return string(p.header) == string(hfield) && string(p.body) == string(stored)
	}
	oh, ob, err := p.open()
	if err != nil || string(ob) != string(body) {
		return false
	}
	var old Header
	if old.unmarshal(oh) != nil {
		return false
	}
	old.Local = true
	return string(old.marshal()) == string(hdr)
}
