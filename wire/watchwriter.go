package wire

import (
	"net/http"
	"time"
)

// WatchWriter writes one watch answer to a client: the headers, then each event framed in the
// client's format (JSON lines, or protobuf's length-prefixed frames). The servers of watches from
// local data — the offline proxy's (hub/local) and the pool's shared stores' (pool) — answer
// through it; each decides when to flush.
type WatchWriter struct {
	w        http.ResponseWriter
	rc       *http.ResponseController
	protobuf bool
	timeout  time.Duration
	// APIVersion and Kind name the watched objects' type in bookmarks.
	APIVersion, Kind string
}

// StartWatch answers 200 with a watch's headers, in protobuf or JSON. A writeTimeout above zero
// bounds every write: a client that stops reading is cut off instead of holding the server.
func StartWatch(w http.ResponseWriter, protobuf bool, writeTimeout time.Duration) *WatchWriter {
	ww := &WatchWriter{w: w, rc: http.NewResponseController(w), protobuf: protobuf, timeout: writeTimeout}
	ct := MediaJSON
	if protobuf {
		ct = MediaProtobufWatch
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "no-cache, private")
	w.WriteHeader(http.StatusOK)
	return ww
}

// Send writes one event (obj in the client's format) without flushing; false when the client is
// gone.
func (ww *WatchWriter) Send(typ string, obj []byte) bool {
	if ww.timeout > 0 {
		_ = ww.rc.SetWriteDeadline(time.Now().Add(ww.timeout))
	}
	if ww.protobuf {
		// The frame's head, then the object as it is: nothing copied (nor allocated, for the
		// event types there are).
		var h [protoFrameHeadMax]byte
		if _, err := ww.w.Write(appendProtoFrameHead(h[:0], typ, len(obj))); err != nil {
			return false
		}
		_, err := ww.w.Write(obj)
		return err == nil
	}
	_, err := ww.w.Write(EncodeJSONWatchEvent(WatchEvent{Type: typ, Object: obj}))
	return err == nil
}

// Flush sends what was written to the client; false when it is gone.
func (ww *WatchWriter) Flush() bool { return ww.rc.Flush() == nil }

// Bookmark writes a BOOKMARK at resourceVersion rv (initialEnd: the one that ends the initial
// events) without flushing.
func (ww *WatchWriter) Bookmark(rv string, initialEnd bool) bool {
	return ww.Send(EventBookmark, BookmarkObject(ww.APIVersion, ww.Kind, rv, initialEnd, ww.protobuf))
}

// End lifts the write deadline: the connection may serve another request.
func (ww *WatchWriter) End() {
	if ww.timeout > 0 {
		_ = ww.rc.SetWriteDeadline(time.Time{})
	}
}

// WatchTimeout is how long a watch stays open: the client's timeoutSeconds, else def.
func (ri *RequestInfo) WatchTimeout(def time.Duration) time.Duration {
	if ri.TimeoutSeconds > 0 {
		return time.Duration(ri.TimeoutSeconds) * time.Second
	}
	return def
}
