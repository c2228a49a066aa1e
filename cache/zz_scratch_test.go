package cache

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"fmt"
	"os"
	"testing"
)

func TestZZAnalyze(t *testing.T) {
	b, err := os.ReadFile(os.Getenv("ZZLOG"))
	if err != nil {
		t.Skip()
	}
	pos := logHeaderLen
	var n, frames, fields, stored, plainN, hdrN, flateN int
	var first []byte
	for pos+frameLen <= len(b) {
		l := int(binary.BigEndian.Uint32(b[pos+4:]))
		p, err := decodePayload(b[pos+frameLen : pos+frameLen+l])
		pos += frameLen + l
		if err != nil || p.typ != recPut {
			continue
		}
		hdr, body, err := p.open()
		if err != nil {
			t.Fatal(err)
		}
		n++
		frames += frameLen
		stored += len(p.body)
		fields += l - len(p.body)
		plainN += len(hdr) + len(body)
		hdrN += len(hdr)
		var fb bytes.Buffer
		w, _ := flate.NewWriter(&fb, flate.BestCompression)
		w.Write(append(append([]byte{}, hdr...), body...))
		w.Close()
		flateN += fb.Len()
		if first == nil {
			first = append(append([]byte{}, hdr...), body...)
			fmt.Printf("%q\n", first)
		}
	}
	fmt.Printf("records %d: frame %d, fields %d, stored body %d (plain %d, header %d), flate %d per record\n", n, frames/n, fields/n, stored/n, plainN/n, hdrN/n, flateN/n)
}

func lzEncodeStart(dst, src []byte, start int) []byte {
	table := new([1 << lzHashBits]int32)
	anchor := start
	for i := 0; i+lzMinMatch <= len(src); {
		v := binary.LittleEndian.Uint32(src[i:])
		h := (v * 2654435761) >> (32 - lzHashBits)
		cand := int(table[h]) - 1
		table[h] = int32(i + 1)
		if i < start {
			i++
			continue
		}
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

func TestZZDict(t *testing.T) {
	b, err := os.ReadFile(os.Getenv("ZZLOG"))
	if err != nil {
		t.Skip()
	}
	dict := []byte(lzDict)
	if f := os.Getenv("ZZDICTFILE"); f != "" {
		dict, _ = os.ReadFile(f)
	}
	pos := logHeaderLen
	var n, base, with int
	for pos+frameLen <= len(b) {
		l := int(binary.BigEndian.Uint32(b[pos+4:]))
		p, err := decodePayload(b[pos+frameLen : pos+frameLen+l])
		pos += frameLen + l
		if err != nil || p.typ != recPut {
			continue
		}
		hdr, body, _ := p.open()
		plain := append(append([]byte{}, hdr...), body...)
		n++
		base += len(lzEncode(nil, plain))
		with += len(lzEncodeStart(nil, append(append([]byte{}, dict...), plain...), len(dict)))
	}
	fmt.Printf("records %d: lz %d, with dict (%d B) %d\n", n, base/n, len(dict), with/n)
}
