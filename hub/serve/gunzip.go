package serve

import (
	"compress/gzip"
	"io"
	"net/http"
	"strings"

	"nodehub/wire"
)

// gunzipWatch makes a gzip-encoded watch answer plain as it streams: since v1.37 the apiserver
// compresses watch-lists (sendInitialEvents; WatchListCompression), not regular watches, for a
// client that accepts gzip, as client-go does by default. The uplink keeps the compressed bytes (they are counted
// before this); the filters, the endpoint corrections and the cache's tee read the events, and
// the node's client, on the same machine, reads them without the compression's CPU.
func gunzipWatch(ri *wire.RequestInfo, resp *http.Response) {
	if ri.Verb != wire.VerbWatch || !strings.EqualFold(strings.TrimSpace(resp.Header.Get("Content-Encoding")), "gzip") {
		return
	}
	resp.Body = &gunzipBody{src: resp.Body}
	resp.Header.Del("Content-Encoding")
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
}

// gunzipBody decompresses a gzip stream as it arrives. The gzip header is read at the first Read,
// not before the answer's headers go to the client: a watch whose first event comes later is not
// held up. Every event the server flushed is readable as soon as its bytes arrive (a gzip flush
// ends a deflate block).
type gunzipBody struct {
	src io.ReadCloser
	zr  *gzip.Reader
	err error
}

func (g *gunzipBody) Read(p []byte) (int, error) {
	if g.zr == nil && g.err == nil {
		g.zr, g.err = gzip.NewReader(g.src)
	}
	if g.err != nil {
		return 0, g.err
	}
	return g.zr.Read(p)
}

func (g *gunzipBody) Close() error { return g.src.Close() }
