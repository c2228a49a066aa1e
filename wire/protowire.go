package wire

import "errors"

// Hand-rolled protobuf wire reading: just what splitting Kubernetes lists, watch frames and
// metadata needs (varints and length-delimited fields).

var errTruncated = errors.New("wire: truncated protobuf")

// Protobuf wire types.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

// varint reads a base-128 varint; n is 0 when b holds no complete varint, -1 when it overflows.
func varint(b []byte) (v uint64, n int) {
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return v, i + 1
		}
	}
	if len(b) >= 10 {
		return 0, -1
	}
	return 0, 0
}

// field is one decoded protobuf field header plus, for length-delimited fields, its payload.
type field struct {
	num  int
	typ  int
	val  uint64 // varint value, or payload length for wireBytes
	data []byte // payload of a wireBytes field
}

// nextField reads one field from b. It returns the field and the bytes it took, or an error for
// malformed or truncated input.
func nextField(b []byte) (field, int, error) {
	tag, n := varint(b)
	if n <= 0 {
		return field{}, 0, errTruncated
	}
	f := field{num: int(tag >> 3), typ: int(tag & 7)}
	if f.num <= 0 {
		return field{}, 0, errors.New("wire: bad protobuf field number")
	}
	switch f.typ {
	case wireVarint:
		v, m := varint(b[n:])
		if m <= 0 {
			return field{}, 0, errTruncated
		}
		f.val = v
		return f, n + m, nil
	case wireFixed64:
		if len(b) < n+8 {
			return field{}, 0, errTruncated
		}
		return f, n + 8, nil
	case wireFixed32:
		if len(b) < n+4 {
			return field{}, 0, errTruncated
		}
		return f, n + 4, nil
	case wireBytes:
		l, m := varint(b[n:])
		if m <= 0 || l > uint64(len(b)) {
			return field{}, 0, errTruncated
		}
		end := n + m + int(l)
		if end > len(b) {
			return field{}, 0, errTruncated
		}
		f.val, f.data = l, b[n+m:end]
		return f, end, nil
	}
	return field{}, 0, errors.New("wire: unsupported protobuf wire type")
}

// protoFields calls fn for each field of a message; it stops early when fn returns false.
func protoFields(msg []byte, fn func(f field) bool) error {
	for len(msg) > 0 {
		f, n, err := nextField(msg)
		if err != nil {
			return err
		}
		if !fn(f) {
			return nil
		}
		msg = msg[n:]
	}
	return nil
}

// protoPath returns the scalar at a path of field numbers: a string or bytes field as its text, a
// varint as its number (bools as "true"/"false" when asBool).
func protoPath(msg []byte, path []int, asBool bool) (string, bool) {
	hit, ok := protoLookup(msg, path)
	if !ok {
		return "", false
	}
	switch hit.typ {
	case wireBytes:
		return string(hit.data), true
	case wireVarint:
		if asBool {
			if hit.val != 0 {
				return "true", true
			}
			return "false", true
		}
		return uitoa(hit.val), true
	}
	return "", false
}

// protoPair returns the bytes of fields 1 and 2 of msg (a map entry's key and value, a
// condition's type and status) without copying: they point into msg. The last occurrence wins.
func protoPair(msg []byte) (one, two []byte) {
	err := protoFields(msg, func(f field) bool {
		if f.typ == wireBytes {
			switch f.num {
			case 1:
				one = f.data
			case 2:
				two = f.data
			}
		}
		return true
	})
	if err != nil {
		return nil, nil // as protoPath: a malformed message holds neither
	}
	return one, two
}

// protoLookup finds the field at path (field numbers, outermost first) without copying: its data
// points into msg. The last occurrence of a field wins, as protobuf merges.
func protoLookup(msg []byte, path []int) (field, bool) {
	var hit field
	for i, num := range path {
		found := false
		err := protoFields(msg, func(f field) bool {
			if f.num == num {
				hit, found = f, true
			}
			return true
		})
		if err != nil || !found {
			return field{}, false
		}
		if i < len(path)-1 {
			if hit.typ != wireBytes {
				return field{}, false
			}
			msg = hit.data
		}
	}
	return hit, len(path) > 0
}

func uitoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}

// appendVarint appends v as a varint.
func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// appendStringField appends field num as a length-delimited field holding s.
func appendStringField(b []byte, num int, s string) []byte {
	b = appendVarint(b, uint64(num)<<3|wireBytes)
	b = appendVarint(b, uint64(len(s)))
	return append(b, s...)
}

// varintLen is how many bytes appendVarint writes for v.
func varintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// fieldLen is how many bytes a length-delimited field of n bytes takes (field numbers below 16).
func fieldLen(n int) int { return 1 + varintLen(uint64(n)) + n }

// appendBytesField appends field num as a length-delimited field.
func appendBytesField(b []byte, num int, data []byte) []byte {
	b = appendVarint(b, uint64(num)<<3|wireBytes)
	b = appendVarint(b, uint64(len(data)))
	return append(b, data...)
}
