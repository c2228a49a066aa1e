package cache

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// The resync's checksum arithmetic (crcshift.go) gives the checksum of any bytes [a, b) from the
// running CRC at a and at b, for a salted log's seed and for a version 1 log's (0).
func TestChecksumFromRunningCRCs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 300<<10)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	sh := newCRCShifts(uint32(len(data)))
	for i := 0; i < 2000; i++ {
		a := rng.IntN(len(data))
		b := a + rng.IntN(len(data)-a+1)
		if i%4 == 0 {
			b = a + rng.IntN(min(64, len(data)-a+1))
		}
		seed := rng.Uint32()
		if i%3 == 0 {
			seed = 0
		}
		ca := crc32.Update(0, crcTable, data[:a])
		cb := crc32.Update(ca, crcTable, data[a:b])
		if got, want := sh.shift(seed^ca, uint32(b-a))^cb, recordSum(seed, data[a:b]); got != want {
			t.Fatalf("[%d, %d) seed %#x: %#x from the running CRCs, %#x read", a, b, seed, got, want)
		}
	}
}
