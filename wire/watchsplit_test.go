package wire

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// A protobuf watch stream cut anywhere gives the same events as whole, and what the splitter
// keeps between writes is never more than the one frame cut short.
func TestProtoWatchSplitsAStreamCutAnywhere(t *testing.T) {
	var stream []byte
	var want []string
	most := 0
	for i, size := range []int{0, 1, 7, 300, 40, 5000, 3, 70000} {
		obj := append([]byte("k8s\x00"), bytes.Repeat([]byte{byte('a' + i)}, size)...)
		typ := []string{EventAdded, EventModified, EventDeleted}[i%3]
		fr := EncodeProtoWatchEvent(WatchEvent{Type: typ, Object: obj})
		most = max(most, len(fr))
		stream = append(stream, fr...)
		want = append(want, fmt.Sprintf("%s %d", typ, len(obj)))
	}
	for _, chunk := range []int{1, 2, 3, 4, 5, 13, 1000, 4096, 32 << 10, len(stream)} {
		var got []string
		sp := NewWatchSplitter(MediaType{Type: MediaProtobuf}, func(ev WatchEvent) error {
			got = append(got, fmt.Sprintf("%s %d", ev.Type, len(ev.Object)))
			return nil
		}).(*protoWatch)
		for off := 0; off < len(stream); off += chunk {
			if _, err := sp.Write(stream[off:min(off+chunk, len(stream))]); err != nil {
				t.Fatalf("chunks of %d: %v", chunk, err)
			}
			if cap(sp.buf) > most {
				t.Fatalf("chunks of %d: the splitter holds %d bytes, more than a frame (%d)", chunk, cap(sp.buf), most)
			}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") || len(sp.buf) != 0 {
			t.Fatalf("chunks of %d: %v (%d left), want %v", chunk, got, len(sp.buf), want)
		}
	}
}
