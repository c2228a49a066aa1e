package pool

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"nodehub/wire"
)

// gatedWriter is a watch's client that reads only while its gate is open: a slow client on a
// loaded node, as every client is when the return's burst arrives.
type gatedWriter struct {
	mu      sync.Mutex
	header  http.Header
	buf     bytes.Buffer
	gate    chan struct{} // non-nil: writes wait until it is closed
	blocked chan struct{} // told when a write waits at the gate
	wrote   chan struct{} // told after each write
}

func newGatedWriter() *gatedWriter {
	return &gatedWriter{header: http.Header{}, blocked: make(chan struct{}, 1), wrote: make(chan struct{}, 1)}
}

func (w *gatedWriter) Header() http.Header { return w.header }
func (w *gatedWriter) WriteHeader(int)     {}
func (w *gatedWriter) Flush()              {}

func (w *gatedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	g := w.gate
	w.mu.Unlock()
	if g != nil {
		select {
		case w.blocked <- struct{}{}:
		default:
		}
		<-g
	}
	w.mu.Lock()
	w.buf.Write(p)
	w.mu.Unlock()
	select {
	case w.wrote <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (w *gatedWriter) hold() {
	w.mu.Lock()
	w.gate = make(chan struct{})
	w.mu.Unlock()
}

func (w *gatedWriter) open() {
	w.mu.Lock()
	close(w.gate)
	w.gate = nil
	w.mu.Unlock()
}

func (w *gatedWriter) body() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// waitFor waits until the body holds want or an ERROR event (30 s at most).
func (w *gatedWriter) waitFor(t *testing.T, want string) string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		if b := w.body(); strings.Contains(b, want) || strings.Contains(b, `"type":"ERROR"`) {
			return b
		}
		select {
		case <-w.wrote:
		case <-deadline:
			t.Fatalf("the watch did not send %s within 30 s: %s", want, w.body())
		}
	}
}

// A burst larger than the event window (within holdFactor times it) — a re-sync's difference, a resumed watch's backlog, a
// follower applying its leader's difference one event at a time — arrives while a client is still
// reading what came before: its watch goes on with every event, none ends in 410 (issue 29: after
// the return, clients relisted everything). Its bookmarks never name a resourceVersion past an
// event it has not been sent.
func TestWindowKeepsWhatAnOpenWatchHasNotRead(t *testing.T) {
	st := NewStore(Resource{Version: "v1", Resource: "services"})
	st.MaxEvents = 3
	st.replace([]*object{svc("a", 10, "x"), svc("b", 11, "x")}, 12, "v1", "Service")
	w := newGatedWriter()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		r := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx)
		st.ServeWatch(w, r, Serving{Info: request(t, "watch=1&allowWatchBookmarks=true&resourceVersion=12"), BookmarkEvery: time.Millisecond})
	}()
	w.hold()
	st.apply(wire.EventModified, svc("a", 13, "x"))
	<-w.blocked // the watch read the event and waits for its client
	// Past MaxEvents, within what an open watch may hold.
	const last = 13 + holdFactor*3 - 1
	for rv := 14; rv <= last; rv++ {
		st.apply(wire.EventModified, svc([]string{"a", "b"}[rv%2], rv, "x"))
	}
	w.open()
	body := w.waitFor(t, fmt.Sprintf(`"resourceVersion":"%d"`, last))
	cancel()
	<-done
	if strings.Contains(body, `"type":"ERROR"`) {
		t.Fatalf("the watch ended in an ERROR: %s", body)
	}
	var sent uint64 // the newest object sent; a bookmark may not be ahead of an event still to come
	for _, line := range strings.Split(strings.TrimSpace(body), "\n") {
		var ev struct {
			Type   string
			Object json.RawMessage
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		m, err := wire.ExtractMeta(ev.Object, "services")
		if err != nil {
			t.Fatal(err)
		}
		rv := parseRV(m.ResourceVersion)
		if ev.Type == wire.EventBookmark {
			sent = max(sent, rv)
			continue
		}
		if rv <= sent {
			t.Fatalf("event at %d after a bookmark or event at %d: %s", rv, sent, body)
		}
		sent = rv
	}
	if sent != last {
		t.Fatalf("the watch got up to %d, want %d: %s", sent, last, body)
	}
}
