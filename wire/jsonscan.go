package wire

// The JSON scanning of the wire: jsonMember below reads a whole object, jsonList (list.go) and
// jsonWatch (watch.go) split a stream as it arrives. All three see strings through one scanner,
// strScanner, so a quote or a bracket inside a string is read the same way everywhere.

// strScanner scans the inside of a JSON string one byte at a time (its state survives between
// a stream's writes): fed the bytes after the opening quote, it says which byte closes it.
type strScanner struct{ esc bool }

// next reads c, the next byte inside the string: end when c is the closing quote, plain when c
// is a character of its own (neither an escape nor what an escape escapes).
func (s *strScanner) next(c byte) (end, plain bool) {
	switch {
	case s.esc:
		s.esc = false
	case c == '\\':
		s.esc = true
	case c == '"':
		return true, false
	default:
		return false, true
	}
	return false, false
}

// jsonMember returns the raw value of a top-level member of a JSON object, scanning the bytes
// (strings and nesting aware) without decoding anything else.
func jsonMember(obj []byte, key string) ([]byte, bool) {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return nil, false
	}
	i++
	for {
		i = skipSpace(obj, i)
		if i >= len(obj) || obj[i] != '"' {
			return nil, false
		}
		ks := i + 1
		ke := skipString(obj, i)
		if ke < 0 {
			return nil, false
		}
		name := obj[ks : ke-1]
		i = skipSpace(obj, ke)
		if i >= len(obj) || obj[i] != ':' {
			return nil, false
		}
		vs := skipSpace(obj, i+1)
		ve := skipValue(obj, vs)
		if ve < 0 {
			return nil, false
		}
		if string(name) == key { // keys with escapes never match the plain names we look up
			return obj[vs:ve], true
		}
		i = skipSpace(obj, ve)
		if i >= len(obj) || obj[i] != ',' {
			return nil, false
		}
		i++
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] ('"'), or -1.
func skipString(b []byte, i int) int {
	var s strScanner
	for j := i + 1; j < len(b); j++ {
		if end, _ := s.next(b[j]); end {
			return j + 1
		}
	}
	return -1
}

// skipValue returns the index after the value starting at b[i], or -1.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = skipString(b, j)
				if j < 0 {
					return -1
				}
				j--
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\n' && b[j] != '\t' && b[j] != '\r' {
		j++
	}
	if j == i {
		return -1
	}
	return j
}
