package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
)

// Watch event types.
const (
	EventAdded    = "ADDED"
	EventModified = "MODIFIED"
	EventDeleted  = "DELETED"
	EventBookmark = "BOOKMARK"
	EventError    = "ERROR"
)

// WatchEvent is one event of a watch stream. Object is the standalone object in the stream's
// format (JSON, or the protobuf envelope), owned by the receiver. Frame, set by the splitters, is
// the event exactly as it was in the stream, framing included, so an untouched event can be
// passed on as it came; it is valid only during the splitter's callback.
type WatchEvent struct {
	Type   string
	Object []byte
	Frame  []byte
}

// WatchSplitter takes a watch stream in pieces and hands out whole events.
type WatchSplitter interface {
	Write(p []byte) (int, error)
}

// NewWatchSplitter returns a splitter for a watch stream of the given media type (newline-separated
// JSON objects, or 4-byte big-endian length-prefixed protobuf frames). A frame of more than
// MaxObjectBytes fails it with ErrTooLarge before more than that is held.
func NewWatchSplitter(m MediaType, fn func(WatchEvent) error) WatchSplitter {
	return newWatchSplitter(m, fn, MaxObjectBytes)
}

func newWatchSplitter(m MediaType, fn func(WatchEvent) error, limit int) WatchSplitter {
	if m.IsProtobuf() {
		return &protoWatch{fn: fn, limit: limit}
	}
	return &jsonWatch{fn: fn, limit: limit}
}

type jsonWatch struct {
	fn    func(WatchEvent) error
	limit int
	depth int
	inStr bool
	str   strScanner
	cur   []byte
	err   error
}

func (s *jsonWatch) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	start := -1
	if s.depth > 0 {
		start = 0
	}
	for i, c := range p {
		if s.inStr {
			if end, _ := s.str.next(c); end {
				s.inStr = false
			}
			continue
		}
		switch c {
		case '"':
			s.inStr = true
		case '{', '[':
			if s.depth == 0 {
				start, s.cur = i, s.cur[:0]
			}
			s.depth++
		case '}', ']':
			s.depth--
			if s.depth < 0 {
				s.err = errors.New("wire: unbalanced JSON watch stream")
				return 0, s.err
			}
			if s.depth == 0 {
				if len(s.cur)+i+1-start > s.limit {
					s.err = tooLarge("watch frame", s.limit)
					s.cur = nil
					return 0, s.err
				}
				s.cur = append(s.cur, p[start:i+1]...)
				start = -1
				if s.err = s.event(append(s.cur, '\n')); s.err != nil {
					return 0, s.err
				}
			}
		}
	}
	if start >= 0 {
		if len(s.cur)+len(p)-start > s.limit {
			s.err = tooLarge("watch frame", s.limit)
			s.cur = nil
			return 0, s.err
		}
		s.cur = append(s.cur, p[start:]...)
	}
	return len(p), nil
}

func (s *jsonWatch) event(frame []byte) error {
	var typ string
	t, ok := jsonMember(frame, "type")
	if ok {
		ok = json.Unmarshal(t, &typ) == nil
	}
	obj, ok2 := jsonMember(frame, "object")
	if !ok || !ok2 {
		return fmt.Errorf("wire: watch event: not {\"type\":…,\"object\":…}")
	}
	return s.fn(WatchEvent{Type: typ, Object: bytes.Clone(obj), Frame: frame})
}

type protoWatch struct {
	fn    func(WatchEvent) error
	limit int
	buf   []byte
	err   error
}

// Write splits whole frames straight out of p (a watch's events usually arrive a frame or more per
// read: nothing is copied for them) and keeps only a frame cut short, until the rest arrives: it
// takes from the next p just what that frame lacks, into a buffer of the frame's size, and splits
// the rest of p in place (a watch-list's initial events arrive as a stream of reads that cut
// frames anywhere: copying each read whole behind the frame cut short would copy the stream).
func (s *protoWatch) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	total := len(p)
	if len(s.buf) > 0 {
		if len(s.buf) < 4 {
			k := min(4-len(s.buf), len(p))
			s.buf, p = append(s.buf, p[:k]...), p[k:]
			if len(s.buf) < 4 {
				return total, nil
			}
		}
		n, err := s.frameLen(s.buf)
		if err != nil {
			return 0, err
		}
		if cap(s.buf) < 4+n {
			s.buf = append(make([]byte, 0, 4+n), s.buf...)
		}
		k := min(4+n-len(s.buf), len(p))
		s.buf, p = append(s.buf, p[:k]...), p[k:]
		if len(s.buf) < 4+n {
			return total, nil
		}
		frame := s.buf
		s.buf = nil
		if err := s.frame(frame, n); err != nil {
			return 0, err
		}
	}
	for len(p) >= 4 {
		n, err := s.frameLen(p)
		if err != nil {
			return 0, err
		}
		if len(p)-4 < n {
			break
		}
		if err := s.frame(p[:4+n], n); err != nil {
			return 0, err
		}
		p = p[4+n:]
	}
	if len(p) > 0 {
		s.buf = append([]byte(nil), p...) // a frame cut short: kept until the rest arrives
	}
	return total, nil
}

// frameLen reads a frame's announced length, within the limit.
func (s *protoWatch) frameLen(b []byte) (int, error) {
	n := binary.BigEndian.Uint32(b)
	if uint64(n) > uint64(s.limit) {
		s.err = fmt.Errorf("%w (%d bytes announced)", tooLarge("watch frame", s.limit), n)
		s.buf = nil
		return 0, s.err
	}
	return int(n), nil
}

// frame hands one whole frame (its 4-byte length, then n bytes) to fn.
func (s *protoWatch) frame(frame []byte, n int) error {
	ev, err := DecodeProtoWatchEvent(frame[4 : 4+n])
	if err == nil {
		ev.Frame = frame
		err = s.fn(ev)
	}
	if err != nil {
		s.err = err
	}
	return err
}

// DecodeProtoWatchEvent reads one protobuf watch frame: a metav1.WatchEvent{type=1,
// object=2 RawExtension{raw=1}}, bare as the apiserver frames it, or in an envelope.
func DecodeProtoWatchEvent(frame []byte) (WatchEvent, error) {
	if IsProtobuf(frame) {
		_, _, raw, err := DecodeProtoEnvelope(frame)
		if err != nil {
			return WatchEvent{}, err
		}
		frame = raw
	}
	var ev WatchEvent
	var obj []byte
	err := protoFields(frame, func(f field) bool {
		switch {
		case f.num == 1 && f.typ == wireBytes:
			ev.Type = string(f.data)
		case f.num == 2 && f.typ == wireBytes:
			if raw, ok := protoLookup(f.data, []int{1}); ok && raw.typ == wireBytes {
				obj = bytes.Clone(raw.data)
			}
		}
		return true
	})
	if err != nil {
		return WatchEvent{}, fmt.Errorf("wire: watch frame: %w", err)
	}
	ev.Object = obj
	return ev, nil
}

// EncodeProtoWatchEvent frames one event as the apiserver does: a 4-byte big-endian length, then a
// bare WatchEvent whose object is the (envelope-encoded) object.
func EncodeProtoWatchEvent(ev WatchEvent) []byte {
	var h [protoFrameHeadMax]byte
	head := appendProtoFrameHead(h[:0], ev.Type, len(ev.Object))
	return append(append(make([]byte, 0, len(head)+len(ev.Object)), head...), ev.Object...)
}

// protoFrameHeadMax bounds what appendProtoFrameHead writes for the event types there are.
const protoFrameHeadMax = 48

// appendProtoFrameHead appends everything of a protobuf watch frame that comes before its
// object's n bytes: the frame's length, WatchEvent.type, and the heads of WatchEvent.object and
// its RawExtension.raw.
func appendProtoFrameHead(b []byte, typ string, n int) []byte {
	raw := fieldLen(n)
	msg := fieldLen(len(typ)) + fieldLen(raw)
	b = binary.BigEndian.AppendUint32(b, uint32(msg))
	b = appendStringField(b, 1, typ)
	b = appendVarint(b, 2<<3|wireBytes)
	b = appendVarint(b, uint64(raw))
	b = appendVarint(b, 1<<3|wireBytes)
	return appendVarint(b, uint64(n))
}

// EncodeJSONWatchEvent writes one event as the apiserver does: {"type":...,"object":...} and a
// newline.
func EncodeJSONWatchEvent(ev WatchEvent) []byte {
	out := make([]byte, 0, len(ev.Object)+32)
	out = append(out, `{"type":`...)
	out = append(out, quote(ev.Type)...)
	out = append(out, `,"object":`...)
	out = append(out, ev.Object...)
	return append(out, "}\n"...)
}
