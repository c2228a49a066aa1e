package cache

import "fmt"

// Bodies are stored compressed (lz.go) when that saves an eighth or more: a 10-endpoint
// EndpointSlice in protobuf shrinks to about half, and flash wears by the bytes written. The
// header stays plain.

const (
	flagLZ      = 1
	minCompress = 256
)

// storedBody returns the bytes to store for a body and their flags.
func storedBody(body []byte) ([]byte, byte) {
	if len(body) < minCompress {
		return body, 0
	}
	z := lzEncode(make([]byte, 0, len(body)/2), body)
	if len(z) > len(body)-len(body)/8 {
		return body, 0
	}
	return z, flagLZ
}

// plainBody returns a stored body as the cloud sent it.
func plainBody(stored []byte, flags byte) ([]byte, error) {
	if flags&flagLZ == 0 {
		return stored, nil
	}
	b, err := lzDecode(stored, maxBody)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return b, nil
}
