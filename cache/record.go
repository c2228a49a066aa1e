package cache

import "encoding/binary"

// Every record's payload (the log engine frames it: frame.go) starts with its type (1 byte), its
// owner (uvarint length + bytes) and the time it was written (uvarint Unix seconds). Then, by type:
//
//	put       namespace, name, header (uvarint length + bytes, see header.go), flags (1 byte:
//	          2 = header and body compressed together, compress.go), body
//	ref       namespace, name, offset of the put record whose object the owner now holds too
//	del       namespace, name
//	list      namespace, label selector, field selector, the ListRecord as JSON
//	listmeta  namespace, label selector, field selector, resourceVersion, complete (1 byte)
//	drop      (nothing more: the owner's objects and lists are gone)
//
// Strings are uvarint length + bytes.

const (
	recPut byte = 1 + iota
	recRef
	recDel
	recList
	recListMeta
	recDrop
)

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
