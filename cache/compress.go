package cache

import (
	"encoding/binary"
	"fmt"
)

// A body of 256 bytes or more is stored compressed (lz.go) together with its header, when that
// saves an eighth or more: the header repeats much of the body (name, namespace, uid, kind,
// labels), and a 10-endpoint EndpointSlice in protobuf and its header shrink from 1.6 KB to about
// 0.5 KB. Flash wears by the bytes written. A put record then has an empty header field, the
// flag flagJoint, and as its body the header's length (uvarint) and the compressed header + body.

const (
	flagJoint   = 2
	minCompress = 256
)

// storedForm returns a put record's header field, flags and body field for a header and body.
func storedForm(hdr, body []byte) (hfield []byte, flags byte, tail []byte) {
	if len(body) < minCompress {
		return hdr, 0, body
	}
	plain := make([]byte, 0, len(hdr)+len(body))
	plain = append(append(plain, hdr...), body...)
	tail = binary.AppendUvarint(make([]byte, 0, len(plain)/2), uint64(len(hdr)))
	tail = lzEncode(tail, plain)
	if len(tail) > len(plain)-len(plain)/8 {
		return hdr, 0, body
	}
	return nil, flagJoint, tail
}

// open returns a put record's header and body as they were stored.
func (p payload) open() (hdr, body []byte, err error) {
	if p.flags&^flagJoint != 0 {
		return nil, nil, fmt.Errorf("%w: unknown record flags %#x", ErrCorrupt, p.flags)
	}
	if p.flags&flagJoint == 0 {
		return p.header, p.body, nil
	}
	hl, k := binary.Uvarint(p.body)
	if k <= 0 || hl > maxHeader {
		return nil, nil, fmt.Errorf("%w: compressed record", ErrCorrupt)
	}
	plain, err := lzDecode(p.body[k:], int(hl)+maxBody)
	if err != nil || uint64(len(plain)) < hl {
		return nil, nil, fmt.Errorf("%w: compressed record: %v", ErrCorrupt, err)
	}
	return plain[:hl], plain[hl:], nil
}
