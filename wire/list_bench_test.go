package wire

import "testing"

// BenchmarkListSplitter splits a list of 500 pods, JSON and protobuf, in 32 KiB writes: the
// splitters' loops run once per byte (JSON) or field (protobuf) of every list a client reads.
func BenchmarkListSplitter(b *testing.B) {
	js, pb := encoders(b)
	for _, tc := range []struct {
		name  string
		media MediaType
		body  []byte
	}{
		{"json", MediaType{Type: MediaJSON}, encode(b, js, podList(500))},
		{"protobuf", MediaType{Type: MediaProtobuf}, encode(b, pb, podList(500))},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.body)))
			for b.Loop() {
				sp := NewListSplitter(tc.media, ListHandler{Item: func([]byte) error { return nil }})
				for off := 0; off < len(tc.body); off += 32 << 10 {
					if _, err := sp.Write(tc.body[off:min(off+32<<10, len(tc.body))]); err != nil {
						b.Fatal(err)
					}
				}
				if err := sp.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
