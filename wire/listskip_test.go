package wire

import (
	"errors"
	"testing"
)

// A handler that wants no more items (an unchanged list the cache already holds) gets none, and
// the list is still read to its end and checked whole.
func TestListSplitterSkip(t *testing.T) {
	js, pb := encoders(t)
	for _, media := range []MediaType{{Type: MediaJSON}, {Type: MediaProtobuf}} {
		enc := js
		if media.IsProtobuf() {
			enc = pb
		}
		body := encode(t, enc, podList(5))
		items := 0
		h := ListHandler{Item: func([]byte) error { items++; return nil }, Skip: func() bool { return items >= 2 }}
		sp := NewListSplitter(media, h)
		if _, err := sp.Write(body); err != nil {
			t.Fatal(err)
		}
		if err := sp.Close(); err != nil || items != 2 {
			t.Fatalf("%s: %d items, %v", media.Type, items, err)
		}
		sp = NewListSplitter(media, ListHandler{Item: h.Item, Skip: func() bool { return true }})
		_, _ = sp.Write(body[:len(body)-3])
		if err := sp.Close(); !errors.Is(err, ErrIncompleteList) {
			t.Fatalf("%s: a cut list skipped: %v", media.Type, err)
		}
	}
}
