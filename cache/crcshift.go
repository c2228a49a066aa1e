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

// crcMul is a · b mod the polynomial (both reflected): a carry-less product, reduced by running
// its high-degree half through four zero bytes.
func crcMul(a, b uint32) uint32 {
	// p's bit k is the coefficient of x^(62-k): shifted by one, the high word holds x^31..x^0 and
	// the low word x^63..x^32, i.e. (low word) · x^32.
	p := clmul32(a, b) << 1
	lo := uint32(p)
	for i := 0; i < 4; i++ {
		lo = crcZeroByte(lo)
	}
	return uint32(p>>32) ^ lo
}

// clmul32 is the carry-less product of a and b with integer multiplications: each operand split
// into four parts whose set bits are four apart, so the carries of a product of two parts land
// only in bits the mask of the sum's part clears.
func clmul32(a, b uint32) uint64 {
	const m0, m1, m2, m3 = 0x1111111111111111, 0x2222222222222222, 0x4444444444444444, 0x8888888888888888
	a0, a1, a2, a3 := uint64(a)&m0, uint64(a)&m1, uint64(a)&m2, uint64(a)&m3
	b0, b1, b2, b3 := uint64(b)&m0, uint64(b)&m1, uint64(b)&m2, uint64(b)&m3
	z0 := a0*b0 ^ a1*b3 ^ a2*b2 ^ a3*b1
	z1 := a0*b1 ^ a1*b0 ^ a2*b3 ^ a3*b2
	z2 := a0*b2 ^ a1*b1 ^ a2*b0 ^ a3*b3
	z3 := a0*b3 ^ a1*b2 ^ a2*b1 ^ a3*b0
	return z0&m0 | z1&m1 | z2&m2 | z3&m3
}
