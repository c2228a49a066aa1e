package filter

import (
	"bytes"
	"errors"
	"io"

	"nodehub/wire"
)

// ErrDropped is returned by Body for a single object a filter removed: the client is told it
// does not exist.
var ErrDropped = errors.New("filter: object removed for this client")

// Body filters a whole get or list answer. When no object changed it returns body itself; when
// one did, a list is joined again from its items (those no filter touched go in as the bytes the
// cloud sent).
func (c *Chain) Body(body []byte, media wire.MediaType, list bool) ([]byte, error) {
	if !c.wants(body) {
		return body, nil // no filter could touch any of it: not even split
	}
	if !list {
		out, v := c.Apply(bytes.TrimSpace(body))
		switch v {
		case Drop:
			return nil, ErrDropped
		case Changed:
			return out, nil
		}
		return body, nil
	}
	var meta wire.ListMeta
	items := [][]byte{}
	touched := false
	sp := wire.NewListSplitter(media, wire.ListHandler{
		Meta: func(m wire.ListMeta) { meta = m },
		Item: func(raw []byte) error {
			out, v := c.Apply(raw)
			touched = touched || v != Keep
			if v != Drop {
				items = append(items, out)
			}
			return nil
		},
	})
	if _, err := sp.Write(body); err != nil {
		return nil, err
	}
	if err := sp.Close(); err != nil {
		return nil, err
	}
	if !touched {
		return body, nil
	}
	b := &wire.ListBuilder{Protobuf: media.IsProtobuf(), APIVersion: meta.APIVersion, Kind: meta.ItemKind()}
	for _, it := range items {
		if err := b.Add(it); err != nil {
			return nil, err
		}
	}
	return b.BytesContinue(meta.ResourceVersion, meta.Continue)
}

func (c *Chain) wants(raw []byte) bool {
	for _, f := range c.filters {
		if f.Wants(raw) {
			return true
		}
	}
	return false
}

// Watch filters a watch stream as it flows: an event whose object a filter changed is sent
// re-encoded, one whose object a filter removed becomes a DELETED event (so the client forgets
// it), and everything else — BOOKMARK and ERROR events included — passes as the bytes it came in.
func (c *Chain) Watch(rc io.ReadCloser, media wire.MediaType) io.ReadCloser {
	w := &watchFilter{rc: rc, buf: make([]byte, 32<<10)}
	frame := wire.EncodeJSONWatchEvent
	if media.IsProtobuf() {
		frame = wire.EncodeProtoWatchEvent
	}
	w.sp = wire.NewWatchSplitter(media, func(ev wire.WatchEvent) error {
		if ev.Type == wire.EventAdded || ev.Type == wire.EventModified {
			out, v := c.Apply(ev.Object)
			switch v {
			case Drop:
				w.out.Write(frame(wire.WatchEvent{Type: wire.EventDeleted, Object: ev.Object}))
				return nil
			case Changed:
				w.out.Write(frame(wire.WatchEvent{Type: ev.Type, Object: out}))
				return nil
			}
		}
		w.out.Write(ev.Frame)
		return nil
	})
	return w
}

type watchFilter struct {
	rc  io.ReadCloser
	sp  wire.WatchSplitter
	buf []byte
	out bytes.Buffer
	err error
}

// Read returns filtered events as soon as a whole one has arrived.
func (w *watchFilter) Read(p []byte) (int, error) {
	for w.out.Len() == 0 {
		if w.err != nil {
			return 0, w.err
		}
		n, err := w.rc.Read(w.buf)
		if n > 0 {
			if _, perr := w.sp.Write(w.buf[:n]); perr != nil {
				w.err = perr
			}
		}
		if err != nil && w.err == nil {
			w.err = err
		}
	}
	return w.out.Read(p)
}

func (w *watchFilter) Close() error { return w.rc.Close() }
