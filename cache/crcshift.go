package cache

// CRC-32C is linear, which lets the resync check a record's checksum from two running values of
// one pass over the file instead of reading the record again (resync.go). With c(y) the CRC-32C
// (crc32.Update from 0) of the file's bytes from a fixed offset to y, the checksum of the bytes
// [a, b) in a log whose salt gave seed is
//
//	recordSum(seed, bytes[a:b]) = (seed ^ c(a)) · x^(8(b-a)) ^ c(b)   (mod the polynomial)
//
// (the crc32.Update of seed over them is seed · x^(8n) ^ the Update of 0, and c(b) is c(a)'s Update
// over them). Values are CRC registers as crc32 keeps them: reflected, bit 31 the coefficient of
// x^0.

// crcOne is the polynomial 1 in the reflected representation.
const crcOne = 1 << 31

// crcShifts holds x^(8n) mod the polynomial for every n below 2^28 as two tables: n's low 14 bits
// and its high ones.
type crcShifts struct{ lo, hi []uint32 }

const crcShiftBits = 14

// newCRCShifts builds the tables for n up to max.
func newCRCShifts(max uint32) *crcShifts {
	t := &crcShifts{lo: make([]uint32, 1<<crcShiftBits), hi: make([]uint32, max>>crcShiftBits+1)}
	v := uint32(crcOne)
	for i := range t.lo {
		t.lo[i] = v
		v = crcZeroByte(v)
	}
	step := v // x^(8 << crcShiftBits)
	t.hi[0] = crcOne
	for i := 1; i < len(t.hi); i++ {
		t.hi[i] = crcMul(t.hi[i-1], step)
	}
	return t
}

// shift returns v · x^(8n) mod the polynomial: v run through n zero bytes.
func (t *crcShifts) shift(v, n uint32) uint32 {
	v = crcMul(v, t.lo[n&(1<<crcShiftBits-1)])
	if h := n >> crcShiftBits; h != 0 {
		v = crcMul(v, t.hi[h])
	}
	return v
}

// crcZeroByte is v · x^8 mod the polynomial.
func crcZeroByte(v uint32) uint32 { return crcTable[byte(v)] ^ v>>8 }

// crcMul is a · b mod the polynomial (both reflected): a carry-less product four bits at a time,
// reduced by running its high half through four zero bytes.
func crcMul(a, b uint32) uint32 {
	var t [16]uint64
	t[1] = uint64(b)
	for i := 2; i < 16; i += 2 {
		t[i] = t[i/2] << 1
		t[i+1] = t[i] ^ t[1]
	}
	var p uint64
	for s := 28; s >= 0; s -= 4 {
		p = p<<4 ^ t[a>>uint(s)&15]
	}
	// p's bit k is the coefficient of x^(62-k): shifted by one, the high word holds x^31..x^0 and
	// the low word x^63..x^32, i.e. (low word) · x^32.
	p <<= 1
	lo := uint32(p)
	for i := 0; i < 4; i++ {
		lo = crcZeroByte(lo)
	}
	return uint32(p>>32) ^ lo
}
