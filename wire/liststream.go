package wire

import (
	"bytes"
)

// A List written item by item, for answers whose items are read one at a time (the offline
// proxy reads them from files): the same bytes ListBuilder makes, without holding the items.
//
// JSON: JSONListHead, the items separated by commas, JSONListTail (the list's metadata comes
// last, which JSON readers accept). Protobuf: ProtoListHead (the envelope, which must announce
// the List message's length), ProtoListMeta, each item as ProtoListItemHead and the item's
// message bytes, ProtoListTail; ProtoPadding fills bytes announced but not written.

// listKind returns the List's apiVersion and kind for items of apiVersion and kind.
func listKind(apiVersion, kind string) (string, string) {
	if kind == "" {
		return "v1", "List"
	}
	return apiVersion, kind + "List"
}

// JSONListHead starts a JSON List of items of apiVersion and kind.
func JSONListHead(apiVersion, kind string) []byte {
	av, k := listKind(apiVersion, kind)
	return []byte(`{"kind":` + quote(k) + `,"apiVersion":` + quote(av) + `,"items":[`)
}

// JSONListItem is one item as it goes into a JSON List.
func JSONListItem(item []byte) []byte { return bytes.TrimSpace(item) }

// JSONListTail ends a JSON List with its resourceVersion.
func JSONListTail(rv string) []byte {
	return []byte(`],"metadata":{"resourceVersion":` + quote(rv) + "}}\n")
}

// ProtoListHead starts a protobuf List of items of apiVersion and kind whose message (metadata,
// items and padding) is listLen bytes long.
func ProtoListHead(apiVersion, kind string, listLen int) []byte {
	av, k := listKind(apiVersion, kind)
	b := appendEnvelopeTypeMeta(nil, av, k)
	b = appendVarint(b, 2<<3|wireBytes)
	return appendVarint(b, uint64(listLen))
}

// ProtoListTail ends the envelope ProtoListHead started.
func ProtoListTail() []byte { return append([]byte(nil), envelopeTail...) }

// ProtoListMeta is the List's metadata field with resourceVersion rv.
func ProtoListMeta(rv string) []byte {
	return appendBytesField(nil, 1, appendBytesField(nil, 2, []byte(rv)))
}

// ProtoListItemHead is what precedes an item's message bytes (n of them) in a List.
func ProtoListItemHead(n int) []byte { return AppendProtoListItemHead(nil, n) }

// AppendProtoListItemHead appends ProtoListItemHead(n) to b.
func AppendProtoListItemHead(b []byte, n int) []byte {
	return appendVarint(appendVarint(b, 2<<3|wireBytes), uint64(n))
}

// ProtoListItemLen is how many bytes an item whose message is n bytes takes in a List.
func ProtoListItemLen(n int) int { return len(ProtoListItemHead(n)) + n }

// ProtoPadding returns n bytes (n ≠ 1) a protobuf List reader skips: unknown field 15, used
// where an item announced in the envelope's length could not be written after all. Every item
// takes at least two bytes, so a shortfall is never exactly one.
func ProtoPadding(n int) []byte {
	var out []byte
	for n > 0 {
		if n == 2 || n == 1 {
			return append(out, 15<<3|wireVarint, 0)
		}
		found := false
		for d := n - 2; d >= 0 && d >= n-12; d-- {
			if 1+len(appendVarint(nil, uint64(d)))+d == n {
				out = appendBytesField(out, 15, make([]byte, d))
				found = true
				break
			}
		}
		if found {
			return out
		}
		out = append(out, 15<<3|wireVarint, 0) // two bytes, and try again
		n -= 2
	}
	return out
}

// ProtoItem returns an object's protobuf message bytes (what a protobuf List holds for it): the
// envelope's contents when raw is protobuf (no copy), else the object converted, without the
// envelope's extra copies.
func ProtoItem(raw []byte) ([]byte, error) {
	if IsProtobuf(raw) {
		_, _, msg, err := DecodeProtoEnvelope(raw)
		return msg, err
	}
	obj, err := Decode(raw)
	if err != nil {
		return nil, err
	}
	return obj.Marshal()
}

// ProtoItemSize is len(ProtoItem(raw)) without encoding anything.
func ProtoItemSize(raw []byte) (int, error) {
	if IsProtobuf(raw) {
		_, _, msg, err := DecodeProtoEnvelope(raw)
		return len(msg), err
	}
	obj, err := Decode(raw)
	if err != nil {
		return 0, err
	}
	if s, ok := obj.(interface{ Size() int }); ok {
		return s.Size(), nil
	}
	msg, err := obj.Marshal()
	return len(msg), err
}
