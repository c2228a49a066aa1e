package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
)

// MaxObjectBytes bounds one object as the cloud or a pool leader sends it: a list item, a watch
// frame, a get answer, decompressed. Whatever reads such bytes holds at most this much of one
// object, and fails the stream past it (ErrTooLarge) instead of growing.
//
// 16 MiB: the apiserver refuses request bodies over 3 MiB and etcd stores values of 1.5 MiB by
// default (operators raise it to a few MiB), so no object written through the apiserver is larger
// than ~3 MiB as sent; served back as JSON it grows by at most a third (base64 of binary data) and
// by escaping. 16 MiB leaves more than 4× that for big ConfigMaps, Secrets and CRD objects, while a
// stream that goes past it can cost a 256 MB gateway at most two such buffers (the object being
// read and the copy handed on).
const MaxObjectBytes = 16 << 20

// ErrTooLarge is what a splitter or reader fails with for an object of more than its limit.
var ErrTooLarge = errors.New("wire: object too large")

func tooLarge(what string, limit int) error {
	return fmt.Errorf("%w: %s over %d bytes", ErrTooLarge, what, limit)
}

// ReadAllLimit reads r to its end, failing with ErrTooLarge (having read at most limit+1 bytes)
// when there is more than limit: a body is never cut short silently. A body of unknown length is
// read into pooled pieces and copied once into a slice of its exact size: io.ReadAll's doublings
// allocated ~2.4 times the body (a kubelet pod list of 180 KB cost 430 KB).
func ReadAllLimit(r io.Reader, limit int64, what string) ([]byte, error) {
	var pieces []*[readPiece]byte
	defer func() {
		for _, p := range pieces {
			readPieces.Put(p)
		}
	}()
	var total int64
	last := readPiece // bytes in the last piece
	for {
		if last == readPiece {
			pieces = append(pieces, readPieces.Get().(*[readPiece]byte))
			last = 0
		}
		buf := pieces[len(pieces)-1][last:]
		if rest := limit + 1 - total; int64(len(buf)) > rest {
			buf = buf[:rest] // never more than limit+1 bytes read
		}
		n, err := r.Read(buf)
		last += n
		total += int64(n)
		if total > limit {
			return nil, fmt.Errorf("%w: %s over %d bytes", ErrTooLarge, what, limit)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	out := make([]byte, 0, total)
	for i, p := range pieces {
		n := readPiece
		if i == len(pieces)-1 {
			n = last
		}
		out = append(out, p[:n]...)
	}
	return out, nil
}

// readPiece is the size of the pieces ReadAllLimit reads into.
const readPiece = 16 << 10

// readPieces recycles ReadAllLimit's pieces.
var readPieces = sync.Pool{New: func() any { return new([readPiece]byte) }}

// Whole is a body held whole in memory (a get or list the filters read and rewrote): its bytes
// are never changed once it is made, so a reader that keeps them (the cache's tee) may keep the
// slice itself instead of copying what it reads.
type Whole struct {
	bytes.Reader
	b []byte
}

// NewWhole returns a body that reads b, which no one changes from then on.
func NewWhole(b []byte) *Whole {
	w := &Whole{b: b}
	w.Reset(b)
	return w
}

// Bytes returns the whole body, read or not.
func (w *Whole) Bytes() []byte { return w.b }

// Close implements io.Closer.
func (w *Whole) Close() error { return nil }
