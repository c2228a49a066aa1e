package cache

import (
	"bytes"
	"compress/flate"
	"fmt"
	"io"
	"sync"
)

// Bodies are stored deflated (at the fastest level) when that saves an eighth or more: a
// 10-endpoint EndpointSlice shrinks to about a third, and flash wears by the bytes written. The
// header stays plain.

const (
	flagDeflate   = 1
	minDeflate    = 256
	deflateLevel  = flate.BestSpeed
	deflateBudget = 8 // keep the deflated form only when it is at most 7/8 of the plain one
)

var deflaters = sync.Pool{New: func() any {
	w, _ := flate.NewWriter(nil, deflateLevel)
	return w
}}

var inflaters = sync.Pool{New: func() any { return flate.NewReader(bytes.NewReader(nil)) }}

// storedBody returns the bytes to store for a body and their flags.
func storedBody(body []byte) ([]byte, byte) {
	if len(body) < minDeflate {
		return body, 0
	}
	var buf bytes.Buffer
	buf.Grow(len(body) / 2)
	w := deflaters.Get().(*flate.Writer)
	w.Reset(&buf)
	_, err := w.Write(body)
	if err == nil {
		err = w.Close()
	}
	deflaters.Put(w)
	if err != nil || buf.Len() > len(body)-len(body)/deflateBudget {
		return body, 0
	}
	return buf.Bytes(), flagDeflate
}

// plainBody returns a stored body as the cloud sent it.
func plainBody(stored []byte, flags byte) ([]byte, error) {
	if flags&flagDeflate == 0 {
		return stored, nil
	}
	r := inflaters.Get().(io.ReadCloser)
	defer inflaters.Put(r)
	if err := r.(flate.Resetter).Reset(bytes.NewReader(stored), nil); err != nil {
		return nil, err
	}
	out := make([]byte, 0, 3*len(stored))
	buf := bytes.NewBuffer(out)
	n, err := buf.ReadFrom(io.LimitReader(r, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("%w: inflate: %v", ErrCorrupt, err)
	}
	if n > maxBody {
		return nil, fmt.Errorf("%w: inflates past %d bytes", ErrCorrupt, maxBody)
	}
	return buf.Bytes(), nil
}
