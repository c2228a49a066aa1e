package serve

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"nodehub/wire"
)

func gzipped(t *testing.T, plain io.Reader) []byte {
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if _, err := io.Copy(zw, plain); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	return b.Bytes()
}

func response(body []byte, gz bool, length int64) *http.Response {
	h := http.Header{"Content-Type": {"application/json"}}
	if gz {
		h.Set("Content-Encoding", "gzip")
	}
	return &http.Response{StatusCode: 200, Header: h, ContentLength: length, Body: io.NopCloser(bytes.NewReader(body))}
}

// A get or list answer a filter must read whole is read within a bound and never cut: a gzip bomb
// fails past the bound, as does a body that ends short of its length or of its gzip stream.
func TestReadFilteredBoundsAndNeverCuts(t *testing.T) {
	bomb := gzipped(t, io.LimitReader(zeros{}, 80<<20)) // ~80 KB compressed
	if _, err := readFiltered(response(bomb, true, int64(len(bomb))), maxFilteredList); !errors.Is(err, wire.ErrTooLarge) {
		t.Fatalf("gzip bomb: %v", err)
	}
	if _, err := readFiltered(response(bomb, true, int64(len(bomb))), wire.MaxObjectBytes); !errors.Is(err, wire.ErrTooLarge) {
		t.Fatalf("gzip bomb, get: %v", err)
	}
	list := []byte(`{"kind":"ServiceList","apiVersion":"v1","items":[]}`)
	z := gzipped(t, bytes.NewReader(list))
	if _, err := readFiltered(response(z[:len(z)-6], true, -1), maxFilteredList); err == nil {
		t.Fatal("a cut gzip stream was read as whole")
	}
	if _, err := readFiltered(response(list[:20], false, int64(len(list))), maxFilteredList); err == nil {
		t.Fatal("a body short of its Content-Length was read as whole")
	}
	if _, err := readFiltered(response(list, false, maxFilteredList+1), maxFilteredList); !errors.Is(err, wire.ErrTooLarge) {
		t.Fatalf("announced over the bound: %v", err)
	}
	if b, err := readFiltered(response(z, true, int64(len(z))), maxFilteredList); err != nil || !bytes.Equal(b, list) {
		t.Fatalf("gzip: %q %v", b, err)
	}
	if b, err := readFiltered(response(list, false, -1), maxFilteredList); err != nil || !bytes.Equal(b, list) {
		t.Fatalf("chunked: %q %v", b, err)
	}
}

func TestBadGatewayIsAStatusWithoutTheCloudsHeaders(t *testing.T) {
	resp := response([]byte("x"), true, 1)
	resp.Header.Set("Content-Type", "application/vnd.kubernetes.protobuf")
	badGateway(resp, &wire.RequestInfo{}, wire.MediaType{Type: wire.MediaJSON}, errors.New("nodehub: too big"))
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 502 || resp.Header.Get("Content-Encoding") != "" || resp.Header.Get("Content-Type") != "application/json" ||
		!strings.Contains(string(body), `"code":502`) || resp.ContentLength != int64(len(body)) {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// kubelet's pod list comes gzip from the apiserver (past 128 KiB) and is read whole for its
// filters on every list: the decompressor (a 32 KiB window and its tables, ~45 KiB) is reused, so
// a list costs its plain bytes and little more.
func TestReadFilteredReusesTheDecompressor(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops pooled decompressors at random")
	}
	plain := bytes.Repeat([]byte(`{"kind":"Pod","metadata":{"name":"p"}},`), 2000) // ~80 KB
	zipped := gzipped(t, bytes.NewReader(plain))
	read := func() {
		out, err := readFiltered(response(zipped, true, int64(len(zipped))), maxFilteredList)
		if err != nil || !bytes.Equal(out, plain) {
			t.Fatalf("%d bytes, %v", len(out), err)
		}
	}
	read()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const n = 20
	for i := 0; i < n; i++ {
		read()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > uint64(len(plain))+16<<10 {
		t.Fatalf("%d bytes allocated per read of a %d-byte body", per, len(plain))
	}
}
