package cache

import (
	"crypto/rand"
	"encoding/binary"
	"hash/crc32"
)

// A resource's log file is a 24-byte file header ("NHLOG\0\0\2" and a random 16-byte salt, new for
// every file) followed by records, each framed as
//
//	magic "\xf1NHR" | payload length (u32 BE) | CRC-32C of salt + payload (u32 BE) | payload
//
// The salt keys the checksum: the bytes of an object (a Secret a pod wrote, stored raw when they do
// not compress) may hold a whole frame, but not one whose checksum holds for the file's salt, which
// no client sees; so a resync after a torn write or a bad region never lands on a record hidden in
// an object. Version 1 logs ("NHLOG\0\0\1", 8 bytes, the checksum of the payload alone) are read
// and rewritten as version 2 at start (upgrade.go).
//
// A record whose frame or checksum does not hold is never applied: at the tail it is a write a
// crash cut short and is truncated away; followed by a chain of valid records that reaches the end
// of the file, it is corruption, skipped (and kept in .quarantine), and the resource's lists are
// marked incomplete because objects were lost. A resync lands only on such a chain: a
// valid-looking record followed by anything else is not taken (it is cut off with the tail, kept
// in .quarantine first).
//
// The payloads (record.go) are the cache's own; to the log engine a record is bytes.

const (
	logMagic     = "NHLOG\x00\x00"
	logV1        = 1 // 8-byte header, the checksum of the payload alone
	logV2        = 2 // 24-byte header with the salt, the checksum keyed by it
	saltLen      = 16
	logHeaderLen = 7 + 1 + saltLen // logMagic, the version, the salt
	frameMagic   = "\xf1NHR"
	frameLen     = 12
	maxRecord    = maxHeader + maxBody + 4096
)

// newLogHeader is a version 2 file header with a fresh salt, and the checksum seed it gives.
func newLogHeader() ([]byte, uint32) {
	h := make([]byte, logHeaderLen)
	copy(h, logMagic)
	h[len(logMagic)] = logV2
	for {
		_, _ = rand.Read(h[len(logMagic)+1:])                 // crypto/rand does not fail on Linux
		if seed := saltSeed(h[len(logMagic)+1:]); seed != 0 { // 0 is an unsalted (version 1) log's
			return h, seed
		}
	}
}

// saltSeed is the CRC-32C state after the salt: a record's checksum continues from it.
func saltSeed(salt []byte) uint32 { return crc32.Checksum(salt, crcTable) }

// recordSum is a payload's checksum in a log whose salt gave seed (0: a version 1 log, unsalted).
func recordSum(seed uint32, p []byte) uint32 {
	if seed == 0 {
		return crc32.Checksum(p, crcTable)
	}
	return crc32.Update(seed, crcTable, p)
}

// frame returns a record's bytes: frame and payload.
func frame(payload []byte, seed uint32) []byte {
	out := make([]byte, frameLen+len(payload))
	copy(out[frameLen:], payload)
	fillFrame(out, seed)
	return out
}

// fillFrame writes the frame of a record built with frameLen bytes of room before its payload.
func fillFrame(rb []byte, seed uint32) {
	p := rb[frameLen:]
	copy(rb, frameMagic)
	binary.BigEndian.PutUint32(rb[4:], uint32(len(p)))
	binary.BigEndian.PutUint32(rb[8:], recordSum(seed, p))
}

// checkFrame returns the payload length a frame announces, or false when it is not a frame.
func checkFrame(b []byte) (uint32, bool) {
	if len(b) < frameLen || string(b[:4]) != frameMagic {
		return 0, false
	}
	n := binary.BigEndian.Uint32(b[4:])
	return n, n <= maxRecord
}
