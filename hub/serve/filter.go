package serve

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"

	"nodehub/filter"
	"nodehub/wire"
)

// maxFilteredList bounds a list answer a filter reads whole (decompressed): 32 MiB, twice the
// largest object (wire.MaxObjectBytes), enough for the pool-scope lists of a large cluster (10,000
// Services are ~15 MiB as JSON). A get answer is one object: wire.MaxObjectBytes.
const maxFilteredList = 32 << 20

// filter runs a response through its filter chain: a watch as it streams; a get or list whole
// (read, decompressed, filtered, and sent on uncompressed with its Content-Length corrected —
// unchanged, when no object was touched). A get or list answer that cannot be read whole — over
// its bound, cut short, not valid gzip, not a list — becomes a 502 Status before any byte of it
// reaches the client: never a 200 with a cut or unfiltered body.
func (p *Pipeline) filter(chain *filter.Chain, ri *wire.RequestInfo, resp *http.Response) {
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
	limit := int64(wire.MaxObjectBytes)
	if ri.Verb == wire.VerbList {
		limit = maxFilteredList
	}
	body, err := readFiltered(resp, limit)
	if err != nil {
		p.Metrics.FilterError("body")
		badGateway(resp, ri, media, fmt.Errorf("nodehub: the cloud's answer could not be read: %w", err))
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
		// A list the filters cannot split is one they cannot filter either: passing it on would
		// give the client what its filters exist to keep from it.
		p.Metrics.FilterError("body")
		badGateway(resp, ri, media, fmt.Errorf("nodehub: the cloud's answer could not be filtered: %w", err))
		return
	}
	resp.Header.Del("Content-Encoding")
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	resp.ContentLength = int64(len(out))
	resp.Body = wire.NewWhole(out)
}

// readFiltered reads a get or list body whole, decompressed, failing past limit (never cutting
// it) and when it ends short of its Content-Length.
func readFiltered(resp *http.Response, limit int64) ([]byte, error) {
	defer resp.Body.Close()
	var rd io.Reader = resp.Body
	size := resp.ContentLength
	if resp.Header.Get("Content-Encoding") == "gzip" {
		g := gunzippers.Get().(*gunzipper)
		defer g.put()
		g.br.Reset(resp.Body)
		if err := g.zr.Reset(g.br); err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		rd, size = &g.zr, -1 // the length is the compressed one
	}
	if size > limit {
		return nil, fmt.Errorf("%w: %d bytes announced, the bound is %d", wire.ErrTooLarge, size, limit)
	}
	if size > 0 {
		buf := make([]byte, size)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return nil, err
		}
		return buf, nil
	}
	return wire.ReadAllLimit(rd, limit, "answer")
}

// gunzipper is a decompressor and its read buffer, reused from one answer to the next (a flate
// decompressor holds a 32 KiB window and its tables, ~45 KiB: kubelet's pod list, which the
// apiserver compresses past 128 KiB, needed a new one on every list).
type gunzipper struct {
	br *bufio.Reader
	zr gzip.Reader
}

var gunzippers = sync.Pool{New: func() any { return &gunzipper{br: bufio.NewReaderSize(nil, 4<<10)} }}

// put returns g to the pool, holding nothing of the answer it read.
func (g *gunzipper) put() {
	g.br.Reset(nil)
	gunzippers.Put(g)
}

// badGateway turns resp into a 502 Status saying why (the cloud's body is already closed).
func badGateway(resp *http.Response, ri *wire.RequestInfo, media wire.MediaType, err error) {
	st, ct := wire.EncodeStatus(wire.NewStatus(http.StatusBadGateway, err.Error()), media.IsProtobuf())
	resp.StatusCode, resp.Status = http.StatusBadGateway, "502 Bad Gateway"
	resp.Header = http.Header{"Content-Type": {ct}, "Content-Length": {strconv.Itoa(len(st))}, "Cache-Control": {"no-cache, private"}}
	resp.ContentLength = int64(len(st))
	resp.Body = io.NopCloser(bytes.NewReader(st))
}
