package cache

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"hash/crc32"
	"slices"
)

// The resync after a torn or corrupt record reads the rest of the file a bounded number of times,
// whatever its bytes are. A tenant's object may hold a frame head every 8 bytes, each announcing
// a length that fits in the file: checking each by reading what it announces (as before issue 28)
// is quadratic, minutes for a few MiB. Instead:
//
//   - one pass takes the running CRC-32C (crcshift.go) at every resyncBlock boundary;
//   - a second finds every frame head, takes the running CRC where its payload starts and, from
//     it, the value the running CRC must have where the payload ends for the checksum to hold;
//   - those ends are checked in batches of resyncBatch heads, by block, each block read once per
//     batch.
//
// Every head costs a constant (two carry-less products, two short CRCs), and every byte is read
// twice plus once per batch whose heads end in its block: heads are at least 8 bytes apart (a head
// inside the previous one's length field announces more than maxRecord), so there are at most
// 1 + (size-from)/(8·resyncBatch) batches. Memory: the batch (16 MiB), 4 bytes per block,
// about 30 per valid record found. The valid records (the records after the fault) are then followed as
// before, once for all the resyncs of a scan (newResyncer).

const (
	resyncBlock = 64 << 10
	resyncFine  = 256     // within a block read for a batch, the running CRC is kept every 256 bytes
	resyncBatch = 1 << 20 // heads checked together: 16 MiB of resyncHead
)

// span is a valid record: where it starts and ends.
type span struct{ at, end int64 }

// resyncHead is a frame head still to check: where its payload ends, its length, and the running
// CRC that end must have.
type resyncHead struct {
	end  int64
	n    uint32
	want uint32
}

// resyncScan is one resync's state: the region [from, size) of the log.
type resyncScan struct {
	l          *logFile
	from, size int64
	marks      []uint32 // the running CRC at from + i·resyncBlock
	shifts     *crcShifts
	heads      []resyncHead
	batch      int // heads checked together
	valid      []span
	buf        []byte
	read       int64 // bytes read (tests)
}

// resyncer answers the resyncs of one scan: every valid record from the first fault to the end of
// the file, found once, and where a resync from each of them lands.
type resyncer struct {
	valid  []span
	land   []int32 // the record a resync from valid[i] lands on (len(valid): none)
	passed []bool  // whether that resync passes over valid records whose chain broke
	read   int64   // bytes read (tests)
}

// newResyncer finds the valid records in [from, size) and where a resync from each lands.
// Frame heads are checked batch heads at a time (resyncBatch; tests take fewer).
func (l *logFile) newResyncer(from, size int64, batch int) *resyncer {
	rs := l.resyncScan(from, size, batch)
	v := rs.valid
	rz := &resyncer{valid: v, land: make([]int32, len(v)), passed: make([]bool, len(v)), read: rs.read}
	chain := make([]int64, len(v)) // where the chain of valid records from valid[i] ends
	for i := len(v) - 1; i >= 0; i-- {
		chain[i] = v[i].end
		if k, ok := rz.find(v[i].end); ok {
			chain[i] = chain[k] // k > i: a record ends after it starts
		}
		switch k, _ := rz.find(chain[i]); {
		case chain[i] == size:
			rz.land[i] = int32(i)
		case k == len(v):
			rz.land[i], rz.passed[i] = int32(k), true
		default:
			rz.land[i], rz.passed[i] = rz.land[k], true
		}
	}
	return rz
}

// find returns the index of the first valid record starting at or after at, and whether one starts
// at at.
func (rz *resyncer) find(at int64) (int, bool) {
	return slices.BinarySearchFunc(rz.valid, at, func(s span, at int64) int { return cmp.Compare(s.at, at) })
}

// resync finds the next offset at or after from where a chain of whole, valid records starts
// that reaches the end of the file, or -1; skipped is set when valid records were passed over
// because their chain broke before the end: nothing inside such a chain is a resync point. A
// record found in the middle of a bad region (an object's bytes may hold a frame) is taken only
// when all that follows it is records. from must be at or after the resyncer's.
func (rz *resyncer) resync(from int64) (at int64, skipped bool) {
	i, _ := rz.find(from)
	if i == len(rz.valid) {
		return -1, false
	}
	if k := int(rz.land[i]); k < len(rz.valid) {
		return rz.valid[k].at, rz.passed[i]
	}
	return -1, rz.passed[i]
}

// resyncScan finds every valid record that starts in [from, size).
func (l *logFile) resyncScan(from, size int64, batch int) *resyncScan {
	rs := &resyncScan{l: l, from: from, size: size, batch: batch, buf: make([]byte, resyncBlock+frameLen)}
	if from >= size {
		return rs
	}
	rs.shifts = newCRCShifts(uint32(min(size-from, maxRecord)))
	if !rs.markBlocks() {
		return rs
	}
	rs.findHeads()
	if !slices.IsSortedFunc(rs.valid, bySpanStart) {
		slices.SortFunc(rs.valid, bySpanStart)
	}
	return rs
}

func bySpanStart(a, b span) int { return cmp.Compare(a.at, b.at) }

// readAt reads the file's bytes [off, min(off+n, size)) into the scan's buffer.
func (rs *resyncScan) readAt(off int64, n int) ([]byte, bool) {
	n = int(min(int64(n), rs.size-off))
	got, err := rs.l.seg.f.ReadAt(rs.buf[:n], off)
	rs.read += int64(got)
	return rs.buf[:n], err == nil || got == n
}

// markBlocks is the first pass: the running CRC at every block boundary up to size.
func (rs *resyncScan) markBlocks() bool {
	c := uint32(0)
	for off := rs.from; ; off += resyncBlock {
		rs.marks = append(rs.marks, c)
		if off+resyncBlock > rs.size {
			return true
		}
		b, ok := rs.readAt(off, resyncBlock)
		if !ok {
			return false
		}
		c = crc32.Update(c, crcTable, b)
	}
}

// findHeads is the second pass: every frame head whose record would fit in the file, checked in
// batches.
func (rs *resyncScan) findHeads() {
	seed := rs.l.seg.seed
	for j := range rs.marks {
		bs := rs.from + int64(j)*resyncBlock
		if bs >= rs.size {
			break
		}
		b, ok := rs.readAt(bs, resyncBlock+frameLen-1) // a head starting in the block is whole
		if !ok {
			break
		}
		c, pos := rs.marks[j], 0
		for i := 0; i < resyncBlock && i+frameLen <= len(b); i++ {
			k := bytes.Index(b[i:min(len(b), resyncBlock+len(frameMagic)-1)], []byte(frameMagic))
			if k < 0 {
				break
			}
			i += k
			if i+frameLen > len(b) {
				break
			}
			n, good := checkFrame(b[i:])
			at := bs + int64(i)
			if !good || at+frameLen+int64(n) > rs.size {
				continue
			}
			c = crc32.Update(c, crcTable, b[pos:i+frameLen])
			pos = i + frameLen
			want := rs.shifts.shift(seed^c, n) ^ binary.BigEndian.Uint32(b[i+8:])
			rs.heads = append(rs.heads, resyncHead{end: at + frameLen + int64(n), n: n, want: want})
			if len(rs.heads) == rs.batch {
				rs.checkHeads()
				b, _ = rs.readAt(bs, resyncBlock+frameLen-1) // the buffer was used
			}
		}
	}
	rs.checkHeads()
}

// checkHeads checks a batch of heads: sorted by the block their payload ends in, each block is
// read once, and a head is a valid record when the running CRC at its end is the one it wants.
func (rs *resyncScan) checkHeads() {
	if len(rs.heads) == 0 {
		return
	}
	first, last := rs.block(rs.heads[0].end), rs.block(rs.heads[0].end)
	for _, h := range rs.heads {
		first, last = min(first, rs.block(h.end)), max(last, rs.block(h.end))
	}
	// A counting sort by block.
	starts := make([]int32, last-first+2)
	for _, h := range rs.heads {
		starts[rs.block(h.end)-first+1]++
	}
	for i := 1; i < len(starts); i++ {
		starts[i] += starts[i-1]
	}
	rs.sortHeads(first, starts)
	var fine []uint32
	for k := 0; k+1 < len(starts); k++ {
		if starts[k] == starts[k+1] {
			continue
		}
		fine = rs.checkBlock(first+k, rs.heads[starts[k]:starts[k+1]], fine)
	}
	rs.heads = rs.heads[:0]
}

// sortHeads puts the heads in the order of the block they end in, in place: the heads ending in
// block first+k go to [starts[k], starts[k+1]).
func (rs *resyncScan) sortHeads(first int, starts []int32) {
	next := slices.Clone(starts[:len(starts)-1])
	for k := range next {
		for next[k] < starts[k+1] {
			h := rs.heads[next[k]]
			t := rs.block(h.end) - first
			if t == k {
				next[k]++
				continue
			}
			rs.heads[next[k]], rs.heads[next[t]] = rs.heads[next[t]], h
			next[t]++
		}
	}
}

func (rs *resyncScan) block(off int64) int { return int((off - rs.from) / resyncBlock) }

// checkBlock checks the heads whose payload ends in block j.
func (rs *resyncScan) checkBlock(j int, heads []resyncHead, fine []uint32) []uint32 {
	bs := rs.from + int64(j)*resyncBlock
	b, ok := rs.readAt(bs, resyncBlock)
	if !ok {
		return fine
	}
	fine = fine[:0]
	c := rs.marks[j]
	for i := 0; i <= len(b); i += resyncFine {
		fine = append(fine, c)
		c = crc32.Update(c, crcTable, b[i:min(len(b), i+resyncFine)])
	}
	for _, h := range heads {
		off := int(h.end - bs)
		k := off / resyncFine
		if crc32.Update(fine[k], crcTable, b[k*resyncFine:off]) == h.want {
			rs.valid = append(rs.valid, span{at: h.end - frameLen - int64(h.n), end: h.end})
		}
	}
	return fine
}
