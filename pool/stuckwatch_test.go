package pool

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"nodehub/wire"
)

// One watch whose client stopped reading (its write waits) holds the event window to no more than
// holdFactor times MaxEvents, never to the store's bound; once the window trimmed past it, it holds
// nothing (it only gets 410), and it gets 410 when its client reads again (review finding 1).
func TestStuckWatchHoldsTheWindowBounded(t *testing.T) {
	st := NewStore(Resource{Version: "v1", Resource: "services"})
	st.MaxEvents, st.MaxObjects = 3, 200
	st.replace([]*object{svc("a", 10, "x"), svc("b", 11, "x")}, 12, "v1", "Service")
	w := newGatedWriter()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		r := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx)
		st.ServeWatch(w, r, Serving{Info: request(t, "watch=1&resourceVersion=12")})
	}()
	w.hold()
	st.apply(wire.EventModified, svc("a", 13, "x"))
	<-w.blocked // the watch read the event and waits for its client, which reads no more
	most := 0
	for rv := 14; rv < 14+5000; rv++ {
		st.apply(wire.EventModified, svc([]string{"a", "b"}[rv%2], rv, "x"))
		st.mu.RLock()
		most = max(most, len(st.events))
		st.mu.RUnlock()
	}
	st.mu.RLock()
	n := len(st.events)
	st.mu.RUnlock()
	if most > holdFactor*st.MaxEvents || n > st.MaxEvents {
		t.Fatalf("a stuck watch held the window to %d events (now %d), want ≤ %d (now ≤ %d)", most, n, holdFactor*st.MaxEvents, st.MaxEvents)
	}
	w.open()
	if body := w.waitFor(t, `"type":"ERROR"`); !strings.Contains(body, `"code":410`) {
		t.Fatalf("the watch the window left behind did not end in 410: %s", body)
	}
	cancel()
	<-done
}

// A watch whose client stops reading is cut off by its write deadline: the watch ends and holds
// the window no longer (review finding 1: ServeWatch wrote with no deadline).
func TestStuckWatchEndsAtItsWriteDeadline(t *testing.T) {
	st := NewStore(Resource{Version: "v1", Resource: "services"})
	st.replace([]*object{svc("a", 10, "x")}, 11, "v1", "Service")
	ended := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(ended)
		st.ServeWatch(w, r, Serving{Info: request(t, "watch=1&resourceVersion=11"), WriteTimeout: 200 * time.Millisecond})
	}))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 10)
	}
	fmt.Fprintf(conn, "GET /api/v1/namespaces/ns/services?watch=1&resourceVersion=11 HTTP/1.1\r\nHost: x\r\n\r\n")
	pad := strings.Repeat("p", 32<<10)
	deadline := time.After(2 * time.Minute)
	for rv := 12; ; rv++ { // the client reads nothing: the writes fill the buffers, then wait
		raw := fmt.Sprintf(`{"kind":"Service","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"%d","annotations":{"pad":%q}}}`, rv, pad)
		o, err := newObject([]byte(raw), Resource{Version: "v1", Resource: "services"})
		if err != nil {
			t.Fatal(err)
		}
		st.apply(wire.EventModified, o)
		select {
		case <-ended:
			st.mu.RLock()
			n := len(st.readers)
			st.mu.RUnlock()
			if n != 0 {
				t.Fatalf("the watch ended, %d readers still hold the window", n)
			}
			return
		case <-deadline:
			t.Fatal("a watch whose client reads nothing was not cut off within 2 min")
		default:
		}
		if rv%64 == 0 { // give the watch's writes time to wait past their deadline: wait on its progress
			select {
			case <-ended:
			case <-time.After(time.Second):
			}
		}
	}
}
