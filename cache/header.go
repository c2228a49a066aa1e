package cache

import (
	"encoding/binary"
	"errors"
	"slices"
)

// The header is a sequence of length-prefixed strings (uvarint length, bytes) in a fixed order —
// content type, apiVersion, kind, namespace, name, uid, resourceVersion — then a flags byte, then
// the labels and the selectable fields, each a uvarint count of key/value string pairs. Reading
// one is a few hundred nanoseconds, which matters when an offline list reads a hundred files.

const flagLocal = 1

var errHeader = errors.New("malformed header")

func (h *Header) marshal() []byte { return h.appendTo(make([]byte, 0, 128)) }

// appendTo appends the marshalled header to b.
func (h *Header) appendTo(b []byte) []byte {
	for _, s := range [...]string{h.ContentType, h.APIVersion, h.Kind, h.Namespace, h.Name, h.UID, h.ResourceVersion} {
		b = appendString(b, s)
	}
	var flags byte
	if h.Local {
		flags |= flagLocal
	}
	b = append(b, flags)
	b = appendMap(b, h.Labels)
	return appendMap(b, h.Fields)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendMap(b []byte, m map[string]string) []byte {
	b = binary.AppendUvarint(b, uint64(len(m)))
	// Sorted: deterministic bytes, so an unchanged object writes an identical file.
	var few [8]string
	keys := few[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b = appendString(appendString(b, k), m[k])
	}
	return b
}

func (h *Header) unmarshal(b []byte) error {
	r := headerReader{b: b, s: string(b)}
	for _, dst := range []*string{&h.ContentType, &h.APIVersion, &h.Kind, &h.Namespace, &h.Name, &h.UID, &h.ResourceVersion} {
		*dst = r.string()
	}
	flags := r.byte()
	h.Local = flags&flagLocal != 0
	h.Labels = r.stringMap()
	h.Fields = r.stringMap()
	if r.err || len(r.b) != 0 {
		return errHeader
	}
	return nil
}

type headerReader struct {
	b []byte
	// s, when set, is b as it started, copied once: the strings read are cut from it (a header's
	// dozen strings are one allocation, not twelve: an offline list reads a header per item).
	s   string
	err bool
}

func (r *headerReader) string() string {
	n, k := binary.Uvarint(r.b)
	if k <= 0 || n > uint64(len(r.b)-k) {
		r.err, r.b = true, nil
		return ""
	}
	var s string
	if r.s != "" {
		at := len(r.s) - len(r.b) + k
		s = r.s[at : at+int(n)]
	} else {
		s = string(r.b[k : k+int(n)])
	}
	r.b = r.b[k+int(n):]
	return s
}

func (r *headerReader) byte() byte {
	if len(r.b) == 0 {
		r.err = true
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *headerReader) stringMap() map[string]string {
	n, k := binary.Uvarint(r.b)
	if k <= 0 || n > uint64(len(r.b)) {
		r.err, r.b = true, nil
		return nil
	}
	r.b = r.b[k:]
	if n == 0 {
		return nil
	}
	m := make(map[string]string, n)
	for i := uint64(0); i < n && !r.err; i++ {
		key := r.string()
		m[key] = r.string()
	}
	return m
}

// headerRV reads just the resourceVersion and the local flag of a marshalled header (the index
// needs no more, and a write or a start should not build label maps it throws away).
func headerRV(b []byte) (rv string, local bool, ok bool) {
	r := headerReader{b: b}
	for i := 0; i < 6; i++ {
		n, k := binary.Uvarint(r.b)
		if k <= 0 || n > uint64(len(r.b)-k) {
			return "", false, false
		}
		r.b = r.b[k+int(n):]
	}
	rv = r.string()
	flags := r.byte()
	return rv, flags&flagLocal != 0, !r.err
}
