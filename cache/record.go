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
// and rewritten as version 2 at start (legacy.go).
//
// and every payload starts with its type (1 byte), its owner (uvarint length + bytes) and the
// time it was written (uvarint Unix seconds). Then, by type:
//
//	put       namespace, name, header (uvarint length + bytes, see header.go), flags (1 byte:
//	          2 = header and body compressed together, compress.go), body
//	ref       namespace, name, offset of the put record whose object the owner now holds too
//	del       namespace, name
//	list      namespace, label selector, field selector, the ListRecord as JSON
//	listmeta  namespace, label selector, field selector, resourceVersion, complete (1 byte)
//	drop      (nothing more: the owner's objects and lists are gone)
//
// Strings are uvarint length + bytes. A record whose frame or checksum does not hold is never
// applied: at the tail it is a write a crash cut short and is truncated away; followed by a chain
// of valid records that reaches the end of the file, it is corruption, skipped (and kept in
// .quarantine), and the resource's lists are marked incomplete because objects were lost. A
// resync lands only on such a chain: a valid-looking record followed by anything else is not
// taken (it is cut off with the tail, kept in .quarantine first).

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

const (
	recPut byte = 1 + iota
	recRef
	recDel
	recList
	recListMeta
	recDrop
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

// payload is a decoded record (strings alias the record's bytes only where noted).
type payload struct {
	typ         byte
	owner       string
	at          uint32
	ns, name    string
	ls, fs      string // list scope (ns is the list's namespace)
	header      []byte // put
	flags       byte   // put
	body        []byte // put: aliases the record; list: the JSON
	target      int64  // ref
	rv          string // listmeta
	complete    bool   // listmeta
	ownerOffset int    // where the owner string starts (to rewrite it in compaction)
	ownerEnd    int
}

func appendHead(b []byte, typ byte, owner string, at uint32) []byte {
	b = append(b, typ)
	b = appendString(b, owner)
	return binary.AppendUvarint(b, uint64(at))
}

func putPayload(b []byte, owner string, at uint32, ns, name string, hdr []byte, flags byte, body []byte) []byte {
	b = appendHead(b, recPut, owner, at)
	b = appendString(appendString(b, ns), name)
	b = appendString(b, string(hdr))
	b = append(b, flags)
	return append(b, body...)
}

func refPayload(b []byte, owner string, at uint32, ns, name string, target int64) []byte {
	b = appendHead(b, recRef, owner, at)
	b = appendString(appendString(b, ns), name)
	return binary.AppendUvarint(b, uint64(target))
}

func delPayload(b []byte, owner string, at uint32, ns, name string) []byte {
	b = appendHead(b, recDel, owner, at)
	return appendString(appendString(b, ns), name)
}

func listPayload(b []byte, owner string, at uint32, sc listScope, js []byte) []byte {
	b = appendHead(b, recList, owner, at)
	b = appendString(appendString(appendString(b, sc.ns), sc.ls), sc.fs)
	return append(b, js...)
}

func listMetaPayload(b []byte, owner string, at uint32, sc listScope, rv string, complete bool) []byte {
	b = appendHead(b, recListMeta, owner, at)
	b = appendString(appendString(appendString(b, sc.ns), sc.ls), sc.fs)
	b = appendString(b, rv)
	if complete {
		return append(b, 1)
	}
	return append(b, 0)
}

func dropPayload(b []byte, owner string, at uint32) []byte {
	return appendHead(b, recDrop, owner, at)
}

// decodePayload parses a record's payload (its checksum already checked).
func decodePayload(b []byte) (payload, error) {
	var p payload
	r := headerReader{b: b}
	p.typ = r.byte()
	p.ownerOffset = len(b) - len(r.b)
	p.owner = r.string()
	p.ownerEnd = len(b) - len(r.b)
	at, k := binary.Uvarint(r.b)
	if k <= 0 {
		return p, errHeader
	}
	p.at, r.b = uint32(at), r.b[k:]
	switch p.typ {
	case recPut:
		p.ns, p.name = r.string(), r.string()
		n, k := binary.Uvarint(r.b)
		if k <= 0 || n > uint64(len(r.b)-k) {
			return p, errHeader
		}
		p.header, r.b = r.b[k:k+int(n)], r.b[k+int(n):]
		p.flags = r.byte()
		p.body, r.b = r.b, nil
	case recRef:
		p.ns, p.name = r.string(), r.string()
		t, k := binary.Uvarint(r.b)
		if k <= 0 {
			return p, errHeader
		}
		p.target, r.b = int64(t), r.b[k:]
	case recDel:
		p.ns, p.name = r.string(), r.string()
	case recList:
		p.ns, p.ls, p.fs = r.string(), r.string(), r.string()
		p.body, r.b = r.b, nil
	case recListMeta:
		p.ns, p.ls, p.fs = r.string(), r.string(), r.string()
		p.rv = r.string()
		p.complete = r.byte() == 1
	case recDrop:
	default:
		return p, errHeader
	}
	if r.err || len(r.b) != 0 {
		return p, errHeader
	}
	return p, nil
}

// id is the index key of an object: namespace/name, or name when cluster-scoped.
func id(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// splitID reverses id.
func splitID(s string) (ns, name string) {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			return s[:i], s[i+1:]
		}
	}
	return "", s
}
