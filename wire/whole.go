package wire

import (
	"bytes"
	"io"
	"net/http"
)

// ReadWhole reads a cloud answer's body whole (up to limit bytes) and leaves it in resp as
// a Whole, so that the answer's later steps (the Autonomy condition, the cache's tee) read its
// bytes without reading or copying it again. An announced length is read into a slice of its
// size. A body over limit, or cut short, is put back as it came (what was read, then the rest):
// false.
func ReadWhole(resp *http.Response, limit int64) (*Whole, bool) {
	if w, ok := resp.Body.(*Whole); ok {
		return w, w.Len() == len(w.Bytes())
	}
	var body []byte
	var err error
	if n := resp.ContentLength; n >= 0 && n <= limit {
		body = make([]byte, n)
		var got int
		got, err = io.ReadFull(resp.Body, body)
		body = body[:got]
	} else {
		body, err = io.ReadAll(io.LimitReader(resp.Body, limit+1))
	}
	if err != nil || int64(len(body)) > limit {
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), resp.Body), resp.Body}
		return nil, false
	}
	resp.Body.Close() // read to its end: its connection is free again
	w := NewWhole(body)
	resp.Body = w
	return w, true
}
