package wire

import (
	"errors"
	"fmt"
	"io"
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
// when there is more than limit: a body is never cut short silently.
func ReadAllLimit(r io.Reader, limit int64, what string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s over %d bytes", ErrTooLarge, what, limit)
	}
	return b, nil
}
