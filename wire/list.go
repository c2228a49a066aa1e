package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ListMeta is what a List says about itself.
type ListMeta struct {
	APIVersion, Kind string
	ResourceVersion  string
	Continue         string
}

// ItemKind is the kind of a List's items: "PodList" holds "Pod".
func (m ListMeta) ItemKind() string { return strings.TrimSuffix(m.Kind, "List") }

// ListHandler receives what a ListSplitter finds. Item gets each item as a standalone object in the
// list's format — a JSON item with "kind" and "apiVersion" first, a protobuf item in its own
// envelope — exactly the bytes a GET of that object returns. The slice is the handler's to keep.
// Meta is called once, before the first Item when the list's metadata precedes its items (as the
// apiserver writes it), else at the end.
type ListHandler struct {
	Meta func(ListMeta)
	Item func(raw []byte) error
	// Skip, when set and true, says the handler wants no more items: they are still read (the
	// list is still checked whole) but not made standalone for Item.
	Skip func() bool
}

// wants reports whether Item is to be called.
func (h ListHandler) wants() bool { return h.Item != nil && (h.Skip == nil || !h.Skip()) }

// ListSplitter takes a List body in pieces, as it streams, and hands out its items without holding
// more than one item in memory. Close reports a list that ended early.
type ListSplitter interface {
	Write(p []byte) (int, error)
	Close() error
}

// ErrIncompleteList is returned by Close when the body ended before the List did.
var ErrIncompleteList = errors.New("wire: list body ended early")

// NewListSplitter returns a splitter for a body of the given media type. An item (or the list's
// metadata) of more than MaxObjectBytes fails it with ErrTooLarge before more than that is held.
func NewListSplitter(m MediaType, h ListHandler) ListSplitter {
	return newListSplitter(m, h, MaxObjectBytes)
}

func newListSplitter(m MediaType, h ListHandler, limit int) ListSplitter {
	if m.IsProtobuf() {
		return &protoList{h: h, limit: limit}
	}
	return &jsonList{h: h, limit: limit}
}

// ---- JSON ----

// jsonList is a byte-at-a-time state machine over the top level of a JSON List. It tracks strings
// and nesting, names the top-level keys, captures "kind", "apiVersion" and "metadata", and
// captures each element of "items".
type jsonList struct {
	h     ListHandler
	limit int // the largest value captured

	depth    int
	inStr    bool
	str      strScanner
	expect   int // at depth 1: expectKey, expectColon, expectValue, expectComma
	key      []byte
	inKey    bool
	curKey   string
	capture  []byte // the value being captured
	capping  bool
	capDepth int  // the depth its closing bracket returns to
	capIsStr bool // a top-level string value
	items    bool // inside the items array
	meta     ListMeta
	metaSent bool
	done     bool
	err      error
}

const (
	expectKey = iota
	expectColon
	expectValue
	expectComma
)

func (s *jsonList) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	start := 0 // where the running capture starts in p
	for i := 0; i < len(p); i++ {
		c := p[i]
		if s.inStr { // most bytes: kept inline, a call only where a string ends
			end, plain := s.str.next(c)
			if end {
				if s.endString(p, start, i); s.err != nil {
					return 0, s.err
				}
			} else if plain && s.inKey && len(s.key) <= maxKey {
				s.key = append(s.key, c) // a longer key is none we look for
			}
			continue
		}
		switch c {
		case ' ', '\t', '\r', '\n':
		case '"':
			s.inStr = true
			if s.depth == 1 {
				start = s.openString(start, i)
			}
		case ':':
			if s.depth == 1 {
				s.expect = expectValue
			}
		case ',':
			if s.depth == 1 {
				s.expect = expectKey
			}
		case '{', '[':
			start = s.open(c, start, i)
		case '}', ']':
			s.close(p, start, i)
		default:
			if s.depth == 1 && s.expect == expectValue {
				s.expect = expectComma // a scalar value we do not need
			}
		}
		if s.err != nil {
			return 0, s.err
		}
	}
	if s.capping {
		if s.err = s.grow(len(p) - start); s.err != nil {
			return 0, s.err
		}
		s.capture = append(s.capture, p[start:]...)
	}
	return len(p), nil
}

// endString reads the closing quote at p[i]: a key is named, a captured string value ends
// (its capture starting at p[start]).
func (s *jsonList) endString(p []byte, start, i int) {
	s.inStr = false
	if s.inKey {
		s.inKey = false
		s.curKey = string(s.key)
		s.expect = expectColon
	} else if s.capping && s.capIsStr {
		s.endCapture(p, start, i)
	}
}

// openString reads the opening quote of a top-level key or value at p[i] and returns where the
// running capture starts: at a "kind" or "apiVersion" value, there.
func (s *jsonList) openString(start, i int) int {
	switch s.expect {
	case expectKey:
		s.inKey, s.key = true, s.key[:0]
	case expectValue:
		s.expect = expectComma
		if s.curKey == "kind" || s.curKey == "apiVersion" {
			s.capping, s.capIsStr, s.capDepth, s.capture, start = true, true, 0, s.capture[:0], i
		}
	}
	return start
}

// open reads an opening bracket c at p[i]: the items array begins, or a capture of the list's
// metadata or of an item; it returns where the running capture starts.
func (s *jsonList) open(c byte, start, i int) int {
	switch {
	case s.depth == 0:
		s.expect = expectKey
	case s.depth == 1 && s.expect == expectValue:
		s.expect = expectComma
		if s.curKey == "items" && c == '[' {
			s.items = true
			s.sendMeta()
		} else if s.curKey == "metadata" && c == '{' {
			s.capping, s.capIsStr, s.capDepth, s.capture, start = true, false, 1, s.capture[:0], i
		}
	case s.depth == 2 && s.items && c == '{' && !s.capping:
		s.capping, s.capIsStr, s.capDepth, s.capture, start = true, false, 2, s.capture[:0], i
	}
	s.depth++
	return start
}

// close reads a closing bracket at p[i]: a capture, the items array or the list ends.
func (s *jsonList) close(p []byte, start, i int) {
	s.depth--
	switch {
	case s.depth < 0:
		s.err = errors.New("wire: unbalanced JSON list")
	case s.capping && !s.capIsStr && s.depth == s.capDepth:
		s.endCapture(p, start, i)
	case s.depth == 1 && s.items:
		s.items = false
	case s.depth == 0:
		s.done = true
	}
}

// endCapture ends the running capture (from p[start]) with p[i], and hands it on.
func (s *jsonList) endCapture(p []byte, start, i int) {
	if s.err = s.grow(i + 1 - start); s.err != nil {
		return
	}
	s.capture = append(s.capture, p[start:i+1]...)
	s.finishCapture()
}

// maxKey is the longest top-level key of a List the splitter names; longer ones are kept short.
const maxKey = 64

// grow checks that the capture may take n more bytes.
func (s *jsonList) grow(n int) error {
	if len(s.capture)+n > s.limit {
		s.capture = nil
		return tooLarge("list item", s.limit)
	}
	return nil
}

func (s *jsonList) finishCapture() {
	s.capping = false
	v := s.capture
	switch {
	case s.capDepth == 2:
		if s.err == nil && s.h.wants() {
			s.err = s.h.Item(jsonWithTypeMeta(v, s.meta.APIVersion, s.meta.ItemKind()))
		}
	case s.curKey == "kind":
		_ = json.Unmarshal(v, &s.meta.Kind)
	case s.curKey == "apiVersion":
		_ = json.Unmarshal(v, &s.meta.APIVersion)
	case s.curKey == "metadata":
		var lm struct {
			ResourceVersion string `json:"resourceVersion"`
			Continue        string `json:"continue"`
		}
		if err := json.Unmarshal(v, &lm); err != nil {
			s.err = fmt.Errorf("wire: list metadata: %w", err)
			return
		}
		s.meta.ResourceVersion, s.meta.Continue = lm.ResourceVersion, lm.Continue
	}
}

func (s *jsonList) sendMeta() {
	if !s.metaSent && s.h.Meta != nil {
		s.h.Meta(s.meta)
	}
	s.metaSent = true
}

func (s *jsonList) Close() error {
	if s.err != nil {
		return s.err
	}
	if !s.done {
		return ErrIncompleteList
	}
	s.sendMeta()
	return nil
}

// jsonWithTypeMeta returns a copy of the object with "kind" and "apiVersion" as its first members,
// the way the apiserver writes a single object (an object that has them already is copied as it
// is): the splitter reuses its capture buffer for the next item.
func jsonWithTypeMeta(obj []byte, apiVersion, kind string) []byte {
	if kind == "" || !bytes.HasPrefix(obj, []byte("{")) || hasTopLevelKind(obj) {
		return bytes.Clone(obj)
	}
	head := `{"kind":` + quote(kind) + `,"apiVersion":` + quote(apiVersion)
	if len(bytes.TrimSpace(obj[1:])) > 1 { // not an empty object
		head += ","
	}
	out := make([]byte, 0, len(head)+len(obj))
	return append(append(out, head...), obj[1:]...)
}

// hasTopLevelKind reports whether the object's first member is "kind" (how the apiserver and
// unstructured objects write it).
func hasTopLevelKind(obj []byte) bool {
	rest := bytes.TrimLeft(obj[1:], " \t\r\n")
	return bytes.HasPrefix(rest, []byte(`"kind"`)) || bytes.HasPrefix(rest, []byte(`"apiVersion"`))
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// ---- protobuf ----

// protoList reads the envelope (magic, runtime.Unknown{typeMeta=1, raw=2}) and, inside raw, the
// List message (metadata=1, items=2 repeated), buffering only the field being read.
type protoList struct {
	h        ListHandler
	limit    int    // the largest field read whole
	buf      []byte // what is not parsed yet: p itself during Write, else a suffix of own
	own      []byte // the kept bytes' buffer
	off      int64  // absolute offset of buf[0]
	stage    int    // 0 magic, 1 envelope fields, 2 list fields
	listEnd  int64
	skip     int64
	meta     ListMeta
	metaSent bool
	sawList  bool
	err      error
}

func (s *protoList) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n := len(p)
	if s.skip > 0 {
		k := min(int64(len(p)), s.skip)
		s.skip -= k
		s.off += k
		p = p[k:]
	}
	if len(s.buf) == 0 {
		// Parsed in place: fields wholly in p are handed on without a copy (handlers copy what
		// they keep); only a field cut short is kept, until the rest arrives.
		s.buf = p
		s.err = s.parse()
		if s.err == nil && len(s.buf) > 0 {
			s.buf = append(s.own[:0], s.buf...)
			s.own = s.buf
		}
		return n, s.err
	}
	s.buf = s.appendKept(p)
	s.err = s.parse()
	return n, s.err
}

// appendKept appends p to the kept bytes, moving them to the front of their buffer first rather
// than growing it when that makes room.
func (s *protoList) appendKept(p []byte) []byte {
	if len(s.buf)+len(p) <= cap(s.own) {
		k := copy(s.own[:cap(s.own)], s.buf)
		s.own = append(s.own[:k], p...)
		return s.own
	}
	s.own = append(append(make([]byte, 0, 2*(len(s.buf)+len(p))), s.buf...), p...)
	return s.own
}

func (s *protoList) parse() error {
	for {
		if s.skip > 0 {
			k := min(int64(len(s.buf)), s.skip)
			s.consume(int(k))
			s.skip -= k
			if s.skip > 0 {
				return nil
			}
		}
		switch s.stage {
		case 0:
			if len(s.buf) < len(protoMagic) {
				return nil
			}
			if !bytes.Equal(s.buf[:len(protoMagic)], protoMagic) {
				return ErrNotProtobuf
			}
			s.consume(len(protoMagic))
			s.stage = 1
			continue
		case 2:
			if s.off == s.listEnd {
				s.stage = 1
				s.sendMeta()
				continue
			}
		}
		if more, err := s.next(); !more || err != nil {
			return err
		}
	}
}

// next reads the field at the start of buf; false when it has not all arrived yet (or failed).
func (s *protoList) next() (bool, error) {
	tag, n := varint(s.buf)
	if n == 0 {
		return false, nil
	}
	if n < 0 {
		return false, errors.New("wire: bad protobuf tag")
	}
	num, typ := int(tag>>3), int(tag&7)
	if typ != wireBytes {
		_, m, err := nextField(s.buf)
		if err == errTruncated {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		s.consume(m)
		return true, nil
	}
	l, m := varint(s.buf[n:])
	if m == 0 {
		return false, nil
	}
	if m < 0 {
		return false, errors.New("wire: bad protobuf length")
	}
	return s.lengthDelimited(num, l, n+m)
}

// lengthDelimited reads field num of l bytes after its header of hdr bytes: the List message is
// descended into, the fields the splitter needs are read whole (once all there), others skipped.
func (s *protoList) lengthDelimited(num int, l uint64, hdr int) (bool, error) {
	switch {
	case s.stage == 1 && num == 2: // raw: the List message; descend into it
		s.consume(hdr)
		s.stage, s.listEnd, s.sawList = 2, s.off+int64(l), true
	case s.stage == 1 && num == 1, s.stage == 2 && (num == 1 || num == 2):
		// a field we read whole: wait for all of it
		if l > uint64(s.limit) {
			s.buf = nil
			return false, tooLarge("list item", s.limit)
		}
		if uint64(len(s.buf)-hdr) < l {
			return false, nil
		}
		if err := s.field(num, s.buf[hdr:hdr+int(l)]); err != nil {
			return false, err
		}
		s.consume(hdr + int(l))
	default:
		s.consume(hdr)
		s.skip = int64(l)
	}
	return true, nil
}

func (s *protoList) field(num int, data []byte) error {
	switch {
	case s.stage == 1 && num == 1: // TypeMeta{apiVersion=1, kind=2}
		s.meta.APIVersion, _ = protoPath(data, []int{1}, false)
		s.meta.Kind, _ = protoPath(data, []int{2}, false)
	case num == 1: // ListMeta{resourceVersion=2, continue=3}
		s.meta.ResourceVersion, _ = protoPath(data, []int{2}, false)
		s.meta.Continue, _ = protoPath(data, []int{3}, false)
	case num == 2:
		s.sendMeta()
		if !s.h.wants() {
			return nil
		}
		item, err := EncodeProtoRaw(s.meta.APIVersion, s.meta.ItemKind(), data)
		if err != nil {
			return err
		}
		return s.h.Item(item)
	}
	return nil
}

func (s *protoList) consume(n int) {
	s.off += int64(n)
	s.buf = s.buf[n:]
	if len(s.buf) == 0 {
		s.buf = nil
		if cap(s.own) > 64<<10 {
			s.own = nil // let a large item's buffer go
		}
	}
}

func (s *protoList) sendMeta() {
	if !s.metaSent && s.h.Meta != nil {
		s.h.Meta(s.meta)
	}
	s.metaSent = true
}

func (s *protoList) Close() error {
	if s.err != nil {
		return s.err
	}
	if !s.sawList || s.stage == 2 || len(s.buf) > 0 || s.skip > 0 {
		return ErrIncompleteList
	}
	s.sendMeta()
	return nil
}
