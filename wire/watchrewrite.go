package wire

import (
	"bytes"
	"io"
	"net/http"
)

// RewriteWatch passes a watch stream of media type m through as it flows, each whole event as
// fn returns it: the bytes to send in its place (its own Frame to pass it as it came), framed
// for the stream (WatchFrame). A stream the splitter cannot read (a frame over MaxObjectBytes, a
// malformed one) ends with an ERROR event carrying a 502 Status, after the events before it: the
// client watches again, as after any watch error.
func RewriteWatch(rc io.ReadCloser, m MediaType, fn func(WatchEvent) []byte) io.ReadCloser {
	w := &rewrittenWatch{rc: rc, buf: make([]byte, 32<<10), protobuf: m.IsProtobuf()}
	w.sp = NewWatchSplitter(m, func(ev WatchEvent) error {
		w.out.Write(fn(ev))
		return nil
	})
	return w
}

// WatchFrame frames one event for a stream in protobuf or JSON.
func WatchFrame(ev WatchEvent, protobuf bool) []byte {
	if protobuf {
		return EncodeProtoWatchEvent(ev)
	}
	return EncodeJSONWatchEvent(ev)
}

type rewrittenWatch struct {
	rc       io.ReadCloser
	sp       WatchSplitter
	protobuf bool
	buf      []byte
	out      bytes.Buffer
	err      error
}

// Read returns the events as soon as a whole one has arrived.
func (w *rewrittenWatch) Read(p []byte) (int, error) {
	for w.out.Len() == 0 {
		if w.err != nil {
			return 0, w.err
		}
		n, err := w.rc.Read(w.buf)
		if n > 0 {
			if _, perr := w.sp.Write(w.buf[:n]); perr != nil {
				st, _ := EncodeStatus(NewStatus(http.StatusBadGateway, "nodehub: the cloud's watch stream could not be read: "+perr.Error()), w.protobuf)
				w.out.Write(WatchFrame(WatchEvent{Type: EventError, Object: st}, w.protobuf))
				w.err = io.EOF
				continue
			}
		}
		if err != nil && w.err == nil {
			w.err = err
		}
	}
	return w.out.Read(p)
}

func (w *rewrittenWatch) Close() error { return w.rc.Close() }
