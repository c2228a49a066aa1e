package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestWatchSplitterBothFormats(t *testing.T) {
	js, pb := encoders(t)
	for _, tc := range []struct {
		enc   runtime.Encoder
		media MediaType
		frame func(WatchEvent) []byte
	}{{js, MediaType{Type: MediaJSON}, EncodeJSONWatchEvent}, {pb, MediaType{Type: MediaProtobuf}, EncodeProtoWatchEvent}} {
		var stream []byte
		var want []WatchEvent
		for i, typ := range []string{EventAdded, EventModified, EventDeleted, EventBookmark} {
			obj := bytes.TrimSuffix(encode(t, tc.enc, testPod(i)), []byte("\n"))
			ev := WatchEvent{Type: typ, Object: obj}
			want = append(want, ev)
			stream = append(stream, tc.frame(ev)...)
		}
		for _, chunk := range []int{1, 5, 1000, len(stream)} {
			var got []WatchEvent
			sp := NewWatchSplitter(tc.media, func(ev WatchEvent) error {
				if w := tc.frame(want[len(got)]); !bytes.Equal(ev.Frame, w) {
					t.Fatalf("%s chunk %d event %d: frame %q, want %q", tc.media.Type, chunk, len(got), ev.Frame, w)
				}
				got = append(got, ev)
				return nil
			})
			buf := make([]byte, chunk) // one buffer for every write, scribbled over after each (as a reader's is)
			for off := 0; off < len(stream); off += chunk {
				n := copy(buf, stream[off:min(off+chunk, len(stream))])
				if _, err := sp.Write(buf[:n]); err != nil {
					t.Fatal(err)
				}
				for i := range buf {
					buf[i] = 0xff
				}
			}
			if len(got) != len(want) {
				t.Fatalf("%s chunk %d: %d events", tc.media.Type, chunk, len(got))
			}
			for i := range got {
				if got[i].Type != want[i].Type || !bytes.Equal(got[i].Object, want[i].Object) {
					t.Fatalf("%s chunk %d event %d: %s %q", tc.media.Type, chunk, i, got[i].Type, got[i].Object[:20])
				}
			}
		}
	}
}

func TestProtoWatchFrameMatchesApimachinery(t *testing.T) {
	_, pb := encoders(t)
	obj := encode(t, pb, testPod(1))
	ours := EncodeProtoWatchEvent(WatchEvent{Type: EventAdded, Object: obj})
	theirs, err := (&metav1.WatchEvent{Type: EventAdded, Object: runtime.RawExtension{Raw: obj}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if n := binary.BigEndian.Uint32(ours); int(n) != len(theirs) || !bytes.Equal(ours[4:], theirs) {
		t.Fatal("our protobuf watch frame differs from metav1.WatchEvent's encoding")
	}
}

func FuzzWatchSplitters(f *testing.F) {
	f.Add([]byte(`{"type":"ADDED","object":{"a":"}"}}`+"\n"+`{"type":"DELETED","object":{}}`), true)
	f.Add(EncodeProtoWatchEvent(WatchEvent{Type: "ADDED", Object: []byte("k8s\x00x")}), false)
	for _, b := range realSeeds(f, "*watch.json") {
		f.Add(b, true)
	}
	for _, b := range realSeeds(f, "*watch.pb") {
		f.Add(b, false)
	}
	f.Fuzz(func(t *testing.T, stream []byte, isJSON bool) {
		m := MediaType{Type: MediaProtobuf}
		if isJSON {
			m.Type = MediaJSON
		}
		n := 0
		sp := NewWatchSplitter(m, func(WatchEvent) error { n++; return nil })
		for off := 0; off < len(stream); off += 3 {
			if _, err := sp.Write(stream[off:min(off+3, len(stream))]); err != nil {
				return
			}
		}
		_ = fmt.Sprint(n)
	})
}
