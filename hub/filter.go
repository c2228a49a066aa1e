package hub

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"strconv"

	"nodehub/filter"
	"nodehub/wire"
)

const maxFilteredBody = 64 << 20

// filter runs a response through its filter chain: a watch as it streams; a get or list whole
// (read, decompressed, filtered, and sent on uncompressed with its Content-Length corrected —
// unchanged, when no object was touched).
func (s *Server) filter(chain *filter.Chain, ri *wire.RequestInfo, resp *http.Response) {
	s.observe(chain)
	media := wire.ParseMediaType(resp.Header.Get("Content-Type"))
	if media.Type != wire.MediaJSON && media.Type != wire.MediaProtobuf {
		return
	}
	if ri.Verb == wire.VerbWatch {
		if resp.Header.Get("Content-Encoding") == "" {
			resp.Body = chain.Watch(resp.Body, media)
		}
		return
	}
	var rd io.Reader = resp.Body
	gz := resp.Header.Get("Content-Encoding") == "gzip"
	if gz {
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			return
		}
		rd = zr
	}
	size := resp.ContentLength
	if gz {
		size = -1 // the length is the compressed one
	}
	body, err := readBody(rd, size)
	resp.Body.Close()
	if err != nil {
		resp.Body = io.NopCloser(errReader{err})
		return
	}
	out, err := chain.Body(body, media, ri.Verb == wire.VerbList)
	switch {
	case errors.Is(err, filter.ErrDropped):
		st, ct := wire.EncodeStatus(wire.NewStatus(http.StatusNotFound, ri.Resource+" \""+ri.Name+"\" not found"), media.IsProtobuf())
		resp.StatusCode, resp.Status = http.StatusNotFound, "404 Not Found"
		resp.Header.Set("Content-Type", ct)
		out = st
	case err != nil:
		s.metrics.filterErrors.Inc("body")
		out = body
	}
	resp.Header.Del("Content-Encoding")
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	resp.ContentLength = int64(len(out))
	resp.Body = io.NopCloser(bytes.NewReader(out))
}

// observe counts a chain's changes and errors in /metrics.
func (s *Server) observe(chain *filter.Chain) {
	chain.OnError = func(name string) { s.metrics.filterErrors.Inc(name) }
	chain.OnChange = func(name string, v filter.Verdict) {
		action := "changed"
		if v == filter.Drop {
			action = "removed"
		}
		s.metrics.filterActions.Inc(name, action)
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// readBody reads a response body whole, sized up front when its length is known.
func readBody(rd io.Reader, n int64) ([]byte, error) {
	if n > 0 && n <= maxFilteredBody {
		buf := make([]byte, n)
		_, err := io.ReadFull(rd, buf)
		return buf, err
	}
	return io.ReadAll(io.LimitReader(rd, maxFilteredBody))
}
