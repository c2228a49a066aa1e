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
	// First pass: run the filters, keeping only what they changed or removed (an untouched list,
	// the common case, costs no copy of its items).
	changed := map[int][]byte{} // item index -> new bytes, nil when removed
	var meta wire.ListMeta
	if err := splitList(body, media, &meta, func(i int, raw []byte) {
		switch out, v := c.Apply(raw); v {
		case Drop:
			changed[i] = nil
		case Changed:
			changed[i] = out
		}
	}); err != nil {
		return nil, err
	}
	if len(changed) == 0 {
		return body, nil
	}
	// Second pass: join the list again from the cloud's items and the changed ones.
	b := &wire.ListBuilder{Protobuf: media.IsProtobuf(), APIVersion: meta.APIVersion, Kind: meta.ItemKind()}
	var addErr error
	if err := splitList(body, media, &meta, func(i int, raw []byte) {
		out, ok := changed[i]
		switch {
		case !ok:
			out = raw
		case out == nil:
			return
		}
		if addErr == nil {
			addErr = b.Add(out)
		}
	}); err != nil {
		return nil, err
	}
	if addErr != nil {
		return nil, addErr
	}
	return b.BytesContinue(meta.ResourceVersion, meta.Continue)
}

// splitList calls item for every item of a whole list body, with its index.
func splitList(body []byte, media wire.MediaType, meta *wire.ListMeta, item func(int, []byte)) error {
	n := 0
	sp := wire.NewListSplitter(media, wire.ListHandler{
		Meta: func(m wire.ListMeta) { *meta = m },
		Item: func(raw []byte) error {
			item(n, raw)
			n++
			return nil
		},
	})
	if _, err := sp.Write(body); err != nil {
		return err
	}
	return sp.Close()
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
	pb := media.IsProtobuf()
	return wire.RewriteWatch(rc, media, func(ev wire.WatchEvent) []byte {
		if ev.Type == wire.EventAdded || ev.Type == wire.EventModified {
			out, v := c.Apply(ev.Object)
			switch v {
			case Drop:
				return wire.WatchFrame(wire.WatchEvent{Type: wire.EventDeleted, Object: ev.Object}, pb)
			case Changed:
				return wire.WatchFrame(wire.WatchEvent{Type: ev.Type, Object: out}, pb)
			}
		}
		return ev.Frame
	})
}
