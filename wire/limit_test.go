package wire

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
)

// endless feeds w the head, then filler in 64 KiB pieces, and reports how many bytes it took
// before failing (or -1 when it never failed within max).
func endless(w interface{ Write([]byte) (int, error) }, head []byte, filler byte, max int) (int, error) {
	if _, err := w.Write(head); err != nil {
		return len(head), err
	}
	piece := bytes.Repeat([]byte{filler}, 64<<10)
	n := len(head)
	for n < max {
		if _, err := w.Write(piece); err != nil {
			return n, err
		}
		n += len(piece)
	}
	return -1, nil
}

func TestListSplittersCapAnItem(t *testing.T) {
	const limit = 1 << 20
	// An item that never ends, a string inside an item that never ends, and list metadata that
	// never ends: each fails after about the limit, never holding more.
	for _, head := range []string{
		`{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b","x":"`,
		`{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1","x":"`,
		`{"kind":"`,
	} {
		items := 0
		sp := newListSplitter(MediaType{Type: MediaJSON}, ListHandler{Item: func([]byte) error { items++; return nil }}, limit)
		n, err := endless(sp, []byte(head), 'x', 8*limit)
		if !errors.Is(err, ErrTooLarge) || n < 0 || n > limit+len(head)+64<<10 {
			t.Fatalf("%.40s…: err %v after %d bytes", head, err, n)
		}
		if c := sp.(*jsonList).capture; cap(c) > 2*limit {
			t.Fatalf("holds %d bytes", cap(c))
		}
		if err := sp.Close(); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("Close: %v", err)
		}
	}
	// A protobuf item announcing more than the limit fails at once, before its bytes arrive.
	body, _ := EncodeProtoRaw("v1", "PodList", appendBytesField(nil, 2, make([]byte, limit+1)))
	sp := newListSplitter(MediaType{Type: MediaProtobuf}, ListHandler{}, limit)
	if _, err := sp.Write(body[:64]); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("protobuf: %v", err)
	}
	// An item of exactly the limit passes.
	item := `{"metadata":{"name":"a"},"x":"` + strings.Repeat("y", limit-len(`{"metadata":{"name":"a"},"x":""}`)) + `"}`
	var got []byte
	sp = newListSplitter(MediaType{Type: MediaJSON}, ListHandler{Item: func(b []byte) error { got = b; return nil }}, limit)
	if _, err := sp.Write([]byte(`{"kind":"PodList","apiVersion":"v1","items":[` + item + `]}`)); err != nil || sp.Close() != nil || len(got) < limit {
		t.Fatalf("item of the limit: %v, %d bytes", err, len(got))
	}
}

func TestListSplitterDefaultCapIsMaxObjectBytes(t *testing.T) {
	sp := NewListSplitter(MediaType{Type: MediaJSON}, ListHandler{})
	n, err := endless(sp, []byte(`{"items":[{"a":"`), 'x', 4*MaxObjectBytes)
	if !errors.Is(err, ErrTooLarge) || n < MaxObjectBytes-64<<10 || n > MaxObjectBytes+64<<10 {
		t.Fatalf("err %v after %d bytes", err, n)
	}
}

func TestWatchSplittersCapAFrame(t *testing.T) {
	const limit = 1 << 20
	events := 0
	fn := func(WatchEvent) error { events++; return nil }
	sp := newWatchSplitter(MediaType{Type: MediaJSON}, fn, limit)
	n, err := endless(sp, []byte(`{"type":"ADDED","object":{"metadata":{"name":"a"}}}`+"\n"+`{"type":"ADDED","object":{"x":"`), 'x', 8*limit)
	if !errors.Is(err, ErrTooLarge) || n < 0 || n > limit+64<<10+100 || events != 1 {
		t.Fatalf("JSON: err %v after %d bytes, %d events", err, n, events)
	}
	if c := sp.(*jsonWatch).cur; cap(c) > 2*limit {
		t.Fatalf("JSON holds %d bytes", cap(c))
	}
	// A protobuf frame announcing more than the limit fails at once.
	sp = newWatchSplitter(MediaType{Type: MediaProtobuf}, fn, limit)
	if _, err := sp.Write([]byte{0, 0x10, 0, 1, 0x0a}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("protobuf: %v", err)
	}
	sp = NewWatchSplitter(MediaType{Type: MediaProtobuf}, fn)
	if _, err := sp.Write([]byte{0x01, 0, 0, 1}); !errors.Is(err, ErrTooLarge) { // 16 MiB + 1
		t.Fatalf("protobuf default cap: %v", err)
	}
}

func TestReadAllLimit(t *testing.T) {
	if b, err := ReadAllLimit(strings.NewReader("abcd"), 4, "x"); err != nil || string(b) != "abcd" {
		t.Fatal(b, err)
	}
	if _, err := ReadAllLimit(strings.NewReader("abcde"), 4, "x"); !errors.Is(err, ErrTooLarge) {
		t.Fatal(err)
	}
}

func TestWholeObject(t *testing.T) {
	js, pb := encoders(t)
	for _, enc := range [][]byte{encode(t, js, testPod(1)), encode(t, pb, testPod(1))} {
		if !WholeObject(enc) {
			t.Fatalf("%q is whole", enc[:20])
		}
		for _, cut := range []int{5, 7, len(enc) / 2} { // a protobuf envelope ends with two empty fields (4 bytes) {
			if WholeObject(enc[:len(enc)-cut]) {
				t.Fatalf("%q cut by %d is whole", enc[:20], cut)
			}
		}
	}
	for _, bad := range []string{`{"metadata":{"name":"a"},"spec":tru}`, `{"a":1}}`, `[1]`, `"x"`, ``} {
		if WholeObject([]byte(bad)) {
			t.Fatalf("%q is whole", bad)
		}
	}
}

// The cache checks every object it keeps (WholeObject): its cost per object, on a real pod.
func BenchmarkWholeObject(b *testing.B) {
	for _, f := range []string{"pod-object.json", "pod-object.pb"} {
		raw, err := os.ReadFile("testdata/real/" + f)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(f, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if !WholeObject(raw) {
					b.Fatal("not whole")
				}
			}
		})
	}
}
