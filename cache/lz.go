package cache

import (
	"encoding/binary"
	"errors"
	"sync"
)

// A small LZ77 block format for stored bodies (the deflate of the standard library needs more
// than a MiB of state per compressor; this needs 16 KiB). A block is a sequence of
//
//	token (literal length << 4 | match length - 4), literal length extension, literals,
//	match offset (u16 LE, 1..65535), match length extension
//
// where a length nibble of 15 continues in the following bytes (each added; 255 means another
// byte follows). The last sequence has literals only: the block ends after them.

const (
	lzHashBits = 12
	lzMinMatch = 4
	lzMaxOff   = 1<<16 - 1
)

var errLZ = errors.New("malformed compressed body")

var lzTables = sync.Pool{New: func() any { return new([1 << lzHashBits]int32) }}

// lzEncode compresses src.
func lzEncode(dst, src []byte) []byte {
	table := lzTables.Get().(*[1 << lzHashBits]int32)
	defer lzTables.Put(table)
	clear(table[:])
	return lzEncodeFrom(dst, src, 0, table)
}

// lzEncodeFrom compresses src[start:]; the matches may reach back into src[:start], whose
// positions table already holds (a preset dictionary's: lzdict.go).
func lzEncodeFrom(dst, src []byte, start int, table *[1 << lzHashBits]int32) []byte {
	anchor := start
	for i := start; i+lzMinMatch <= len(src); {
		v := binary.LittleEndian.Uint32(src[i:])
		h := (v * 2654435761) >> (32 - lzHashBits)
		cand := int(table[h]) - 1
		table[h] = int32(i + 1)
		if cand < 0 || i-cand > lzMaxOff || binary.LittleEndian.Uint32(src[cand:]) != v {
			i++
			continue
		}
		ml := lzMinMatch
		for i+ml < len(src) && src[cand+ml] == src[i+ml] {
			ml++
		}
		dst = lzSequence(dst, src[anchor:i], i-cand, ml)
		i += ml
		anchor = i
	}
	return lzSequence(dst, src[anchor:], 0, 0)
}

// lzHashes fills table with the positions of src as lzEncodeFrom would have left them.
func lzHashes(table *[1 << lzHashBits]int32, src []byte) {
	for i := 0; i+lzMinMatch <= len(src); i++ {
		v := binary.LittleEndian.Uint32(src[i:])
		table[(v*2654435761)>>(32-lzHashBits)] = int32(i + 1)
	}
}

// lzSequence appends one sequence (the last one when off is 0).
func lzSequence(dst, lit []byte, off, ml int) []byte {
	tok := byte(min(len(lit), 15)) << 4
	if off > 0 {
		tok |= byte(min(ml-lzMinMatch, 15))
	}
	dst = append(dst, tok)
	if len(lit) >= 15 {
		dst = lzLength(dst, len(lit)-15)
	}
	dst = append(dst, lit...)
	if off == 0 {
		return dst
	}
	dst = append(dst, byte(off), byte(off>>8))
	if ml-lzMinMatch >= 15 {
		dst = lzLength(dst, ml-lzMinMatch-15)
	}
	return dst
}

func lzLength(dst []byte, n int) []byte {
	for n >= 255 {
		dst = append(dst, 255)
		n -= 255
	}
	return append(dst, byte(n))
}

// lzExt reads a length's extension bytes from src[i:] (each adds to n; 255 says another follows),
// and returns where they end and the length; past src or past max is damage.
func lzExt(src []byte, i, n, max int) (int, int, error) {
	for {
		if i >= len(src) {
			return 0, 0, errLZ
		}
		b := src[i]
		i++
		n += int(b)
		if n > max {
			return 0, 0, errLZ
		}
		if b != 255 {
			return i, n, nil
		}
	}
}

// lzSize returns the length of what src decodes to (up to max), without decoding it, so the
// result is allocated once at its size (an offline list of large objects makes no garbage).
func lzSize(src []byte, max int) (int, error) {
	n := 0
	var err error
	for i := 0; i < len(src); {
		tok := src[i]
		i++
		lit := int(tok >> 4)
		if lit == 15 {
			if i, lit, err = lzExt(src, i, lit, max); err != nil {
				return 0, err
			}
		}
		if lit > len(src)-i {
			return 0, errLZ
		}
		i += lit
		n += lit
		if i == len(src) {
			break
		}
		i += 2
		ml := int(tok&15) + lzMinMatch
		if tok&15 == 15 {
			if i, ml, err = lzExt(src, i, ml, max); err != nil {
				return 0, err
			}
		}
		if n += ml; n > max {
			return 0, errLZ
		}
	}
	return n, nil
}

// lzDecode reverses lzEncode (lzEncodeFrom with dict before src); the result may not pass max
// bytes.
func lzDecode(src, dict []byte, max int) ([]byte, error) {
	size, err := lzSize(src, max)
	if err != nil {
		return nil, err
	}
	return lzDecodeTo(make([]byte, 0, size), src, dict, max, max+1)
}

// lzDecodeTo decodes src into dst (empty), stopping once it holds stop bytes (a whole sequence
// more, at most: a record's header without its body). Matches may reach back into dict, the bytes
// the encoder had before src (a preset dictionary, or nothing).
func lzDecodeTo(dst, src, dict []byte, max, stop int) ([]byte, error) {
	var err error
	for i := 0; i < len(src); {
		tok := src[i]
		i++
		lit := int(tok >> 4)
		if lit == 15 {
			if i, lit, err = lzExt(src, i, lit, max); err != nil {
				return nil, err
			}
		}
		if lit > len(src)-i || len(dst)+lit > max {
			return nil, errLZ
		}
		dst = append(dst, src[i:i+lit]...)
		i += lit
		if len(dst) >= stop {
			return dst, nil
		}
		if i == len(src) {
			if tok&15 != 0 {
				return nil, errLZ
			}
			return dst, nil
		}
		if i+2 > len(src) {
			return nil, errLZ
		}
		off := int(src[i]) | int(src[i+1])<<8
		i += 2
		ml := int(tok&15) + lzMinMatch
		if tok&15 == 15 {
			if i, ml, err = lzExt(src, i, ml, max); err != nil {
				return nil, err
			}
		}
		if off == 0 || off > len(dst)+len(dict) || len(dst)+ml > max {
			return nil, errLZ
		}
		if off > len(dst) { // the match starts in the dictionary
			from := len(dict) - (off - len(dst))
			n := min(ml, len(dict)-from)
			dst = append(dst, dict[from:from+n]...)
			ml -= n
		}
		dst, _ = copyMatch(dst, off, ml)
		if len(dst) >= stop {
			return dst, nil
		}
	}
	return dst, nil
}

// copyMatch appends ml bytes that repeat dst from off bytes back, and says in how many copies. A
// match may overlap itself (off < ml: a run): each copy reads only bytes already written, from
// the match's start, so each is twice the one before — 16 MiB of one byte is 25 copies, not
// 16 million.
func copyMatch(dst []byte, off, ml int) ([]byte, int) {
	steps := 0
	for start := len(dst) - off; ml > 0; steps++ {
		// dst[start:] repeats with period off and holds a whole number of periods: the next
		// bytes are its first ones.
		n := min(ml, len(dst)-start)
		dst = append(dst, dst[start:start+n]...)
		ml -= n
	}
	return dst, steps
}
