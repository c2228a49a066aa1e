package wire

import "io"

// CountingBody passes a body through and hands Count the number of bytes each read returned:
// the bytes a cloud answer brought, counted as they stream (the hub's and the pool's metrics).
type CountingBody struct {
	io.ReadCloser
	Count func(n int)
}

func (c *CountingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	if n > 0 {
		c.Count(n)
	}
	return n, err
}
