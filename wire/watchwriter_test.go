package wire

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A watch answer written by WatchWriter reads back, event by event, through the watch splitter of
// its content type: JSON lines and protobuf frames alike.
func TestWatchWriterFramesReadBack(t *testing.T) {
	for _, pb := range []bool{false, true} {
		rec := httptest.NewRecorder()
		ww := StartWatch(rec, pb, time.Second)
		ww.APIVersion, ww.Kind = "v1", "Pod"
		obj := []byte(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"3"}}`)
		if pb {
			var err error
			if obj, err = Convert(obj, true); err != nil {
				t.Fatal(err)
			}
		}
		if !ww.Send(EventAdded, obj) || !ww.Bookmark("4", true) || !ww.Flush() {
			t.Fatal("write failed")
		}
		ww.End()
		ct := rec.Header().Get("Content-Type")
		if rec.Code != http.StatusOK || (pb != (ct == MediaProtobufWatch)) || !pb && ct != MediaJSON || rec.Header().Get("Cache-Control") != "no-cache, private" {
			t.Fatalf("protobuf %v: %d %q", pb, rec.Code, ct)
		}
		var types []string
		sp := NewWatchSplitter(ParseMediaType(ct), func(ev WatchEvent) error {
			types = append(types, ev.Type)
			return nil
		})
		if _, err := sp.Write(rec.Body.Bytes()); err != nil {
			t.Fatal(err)
		}
		if strings.Join(types, ",") != "ADDED,BOOKMARK" {
			t.Fatalf("protobuf %v: events %v", pb, types)
		}
	}
}

func TestWatchTimeout(t *testing.T) {
	if d := (&RequestInfo{}).WatchTimeout(time.Minute); d != time.Minute {
		t.Fatal(d)
	}
	if d := (&RequestInfo{TimeoutSeconds: 7}).WatchTimeout(time.Minute); d != 7*time.Second {
		t.Fatal(d)
	}
}

// A protobuf frame written in pieces (head, then the object untouched) is the nested message the
// apiserver writes: WatchEvent{type, object: RawExtension{raw}} behind its 4-byte length.
func TestProtoFrameHeadIsTheNestedMessage(t *testing.T) {
	for _, typ := range []string{EventAdded, EventModified, EventDeleted, EventBookmark, EventError, ""} {
		for _, n := range []int{0, 1, 127, 128, 16383, 16384, 2 << 20} {
			obj := make([]byte, n)
			raw := appendBytesField(nil, 1, obj)
			msg := appendBytesField(appendBytesField(nil, 1, []byte(typ)), 2, raw)
			want := append([]byte{byte(len(msg) >> 24), byte(len(msg) >> 16), byte(len(msg) >> 8), byte(len(msg))}, msg...)
			if got := EncodeProtoWatchEvent(WatchEvent{Type: typ, Object: obj}); string(got) != string(want) {
				t.Fatalf("%q with %d bytes: frame differs", typ, n)
			}
			rec := httptest.NewRecorder()
			ww := StartWatch(rec, true, 0)
			if !ww.Send(typ, obj) || rec.Body.String() != string(want) {
				t.Fatalf("%q with %d bytes: WatchWriter's frame differs", typ, n)
			}
		}
	}
}
