package wire

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"
	"testing/iotest"
)

// A body of unknown length read in odd pieces comes back whole and exact, and past the limit
// fails without reading more than limit+1 bytes.
func TestReadAllLimitPieces(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef!"), 11000) // 187 KB: a dozen pieces
	for _, r := range []io.Reader{bytes.NewReader(body), iotest.HalfReader(bytes.NewReader(body)), iotest.DataErrReader(bytes.NewReader(body))} {
		got, err := ReadAllLimit(r, int64(len(body)), "x")
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("%d bytes, %v", len(got), err)
		}
	}
	for _, limit := range []int64{0, 16<<10 - 1, 16 << 10, 3*16<<10 + 5} {
		r := bytes.NewReader(body)
		if _, err := ReadAllLimit(r, limit, "x"); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("limit %d: %v", limit, err)
		}
		if read := int64(len(body)) - int64(r.Len()); read > limit+1 {
			t.Fatalf("limit %d: read %d bytes", limit, read)
		}
	}
	if b, err := ReadAllLimit(bytes.NewReader(nil), 10, "x"); err != nil || len(b) != 0 {
		t.Fatal(b, err)
	}
}

// Reading a body of unknown length allocates about the body once (io.ReadAll's doublings cost
// ~2.4 times it: a kubelet pod list read by the filters).
func TestReadAllLimitAllocatesTheBodyOnce(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 180_000)
	least := uint64(1 << 62)
	for i := 0; i < 5; i++ { // the least of a few: a garbage collection may empty the pool once
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if _, err := ReadAllLimit(io.MultiReader(bytes.NewReader(body)), 1<<20, "x"); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	if least > uint64(len(body))*5/4 {
		t.Fatalf("reading %d bytes allocated %d", len(body), least)
	}
}
