package cache

import (
	"encoding/binary"
	"fmt"
	"sync"
)

// A body of 256 bytes or more is stored compressed (lz.go) together with its header, when that
// saves an eighth or more: the header repeats much of the body (name, namespace, uid, kind,
// labels), and a 10-endpoint EndpointSlice in protobuf and its header shrink from 1.6 KB to about
// 0.58 KB. Flash wears by the bytes written. A put record then has an empty header field, the
// flag flagJoint, and as its body the header's length (uvarint) and the compressed header + body.
// Records written since issue 32 are compressed with a preset dictionary (lzdict.go) and carry
// flagDict too (the slice and its header: about 0.42 KB); those before it are read as they are.

const (
	flagJoint   = 2
	flagDict    = 4
	minCompress = 256
)

// scratch is the buffers one Put builds its record's fields in; they are reused (a write per
// watch event allocates nothing for them). joint is the dictionary, then the header and body.
type scratch struct{ plain, tail, joint []byte }

var scratches = sync.Pool{New: func() any { return new(scratch) }}

func getScratch() *scratch { return scratches.Get().(*scratch) }

func putScratch(sc *scratch) {
	if cap(sc.plain) > 64<<10 || cap(sc.tail) > 64<<10 || cap(sc.joint) > 64<<10 {
		return // a large object's buffers go
	}
	scratches.Put(sc)
}

// storedForm returns a put record's header field, flags and body field for a header and body.
// hdr must be sc.plain (the header, marshalled into it); what it returns aliases sc, hdr or body.
func storedForm(sc *scratch, hdr, body []byte) (hfield []byte, flags byte, tail []byte) {
	if len(body) < minCompress {
		return hdr, 0, body
	}
	n := len(hdr)
	sc.joint = append(append(append(sc.joint[:0], lzDict...), hdr...), body...)
	plain := sc.joint[len(lzDict):]
	sc.tail = lzEncodeDict(binary.AppendUvarint(sc.tail[:0], uint64(n)), sc.joint)
	if len(sc.tail) > len(plain)-len(plain)/8 {
		return hdr, 0, body
	}
	return nil, flagJoint | flagDict, sc.tail
}

// checkFlags refuses a put record's flags this build does not know.
func (p payload) checkFlags() error {
	if p.flags&^(flagJoint|flagDict) != 0 || p.flags == flagDict {
		return fmt.Errorf("%w: unknown record flags %#x", ErrCorrupt, p.flags)
	}
	return nil
}

// dict is the dictionary a compressed record's matches may reach back into.
func (p payload) dict() []byte {
	if p.flags&flagDict != 0 {
		return lzDictBytes
	}
	return nil
}

// openHeader returns a put record's header alone: of a compressed record, only as much is
// decoded as holds the header (start-up indexes every record, superseded ones too, and reads no
// body). A compressed record's header is decoded into buf (nil: a new one), whose bytes it may
// overwrite; scratch is the buffer to decode the next one into (buf, or a larger one).
func (p payload) openHeader(buf []byte) (hdr, scratch []byte, err error) {
	if err := p.checkFlags(); err != nil {
		return nil, buf, err
	}
	if p.flags&flagJoint == 0 {
		return p.header, buf, nil
	}
	hl, k := binary.Uvarint(p.body)
	if k <= 0 || hl > maxHeader {
		return nil, buf, fmt.Errorf("%w: compressed record", ErrCorrupt)
	}
	plain, err := lzDecodeTo(buf[:0], p.body[k:], p.dict(), int(hl)+maxBody, int(hl))
	if err != nil || uint64(len(plain)) < hl {
		return nil, buf, fmt.Errorf("%w: compressed record: %v", ErrCorrupt, err)
	}
	return plain[:hl], plain[:0], nil
}

// open returns a put record's header and body as they were stored.
func (p payload) open() (hdr, body []byte, err error) {
	if err := p.checkFlags(); err != nil {
		return nil, nil, err
	}
	if p.flags&flagJoint == 0 {
		return p.header, p.body, nil
	}
	hl, k := binary.Uvarint(p.body)
	if k <= 0 || hl > maxHeader {
		return nil, nil, fmt.Errorf("%w: compressed record", ErrCorrupt)
	}
	plain, err := lzDecode(p.body[k:], p.dict(), int(hl)+maxBody)
	if err != nil || uint64(len(plain)) < hl {
		return nil, nil, fmt.Errorf("%w: compressed record: %v", ErrCorrupt, err)
	}
	return plain[:hl], plain[hl:], nil
}
