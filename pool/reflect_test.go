package pool

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeUpstream answers lists with a fixed body and watches with a stream the test writes to.
type fakeUpstream struct {
	mu      sync.Mutex
	list    string
	watches chan *io.PipeWriter
	paths   []string
}

func (f *fakeUpstream) fetch(ctx context.Context, path string) (*http.Response, error) {
	f.mu.Lock()
	f.paths = append(f.paths, path)
	list := f.list
	f.mu.Unlock()
	h := http.Header{"Content-Type": {"application/json"}}
	if !strings.Contains(path, "watch=1") {
		return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(list))}, nil
	}
	pr, pw := io.Pipe()
	context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })
	f.watches <- pw
	return &http.Response{StatusCode: 200, Header: h, Body: pr}, nil
}

func TestReflectorListsWatchesAndNoticesSilence(t *testing.T) {
	f := &fakeUpstream{watches: make(chan *io.PipeWriter, 4),
		list: `{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"a","namespace":"ns","resourceVersion":"5"}}]}`}
	failed := make(chan error, 64)
	st := NewStore(Resource{Version: "v1", Resource: "services"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go st.run(ctx, func() (Upstream, <-chan struct{}) {
		return Upstream{Name: "leader", Fetch: f.fetch, Silence: 300 * time.Millisecond, Failed: func(err error) { failed <- err }}, nil
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))

	nextWatch := func() *io.PipeWriter {
		t.Helper()
		select {
		case w := <-f.watches:
			return w
		case <-time.After(30 * time.Second):
			t.Fatal("no watch")
			return nil
		}
	}
	w := nextWatch()
	if !st.Synced() || st.ResourceVersion() != 7 {
		t.Fatalf("after the list: synced %v rv %d", st.Synced(), st.ResourceVersion())
	}
	// An event, then silence. A loaded machine may let the 300 ms of silence end the watch before
	// the event got through: then the reflector watches again from rv 7 and the event is sent again.
	for attempt := 1; ; attempt++ {
		go w.Write([]byte(`{"type":"MODIFIED","object":{"kind":"Service","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"9"}}}` + "\n"))
		select {
		case err := <-failed:
			if !strings.Contains(err.Error(), "silent") {
				t.Fatalf("failure %v, want silence", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a silent upstream was not noticed")
		}
		if st.ResourceVersion() == 9 {
			break
		}
		if attempt == 5 {
			t.Fatalf("rv %d after the event, want 9", st.ResourceVersion())
		}
		w = nextWatch()
	}
	// The next watch resumes from the store's resourceVersion; an ERROR (410) makes it re-list.
	w = nextWatch()
	f.mu.Lock()
	last := f.paths[len(f.paths)-1]
	f.list = `{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"20"},"items":[]}`
	f.mu.Unlock()
	if !strings.Contains(last, "resourceVersion=9") {
		t.Fatalf("re-watch %s, want resourceVersion=9", last)
	}
	for attempt := 1; ; attempt++ { // again, the silence may end the watch before the ERROR got through
		go w.Write([]byte(`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","code":410,"reason":"Expired"}}` + "\n"))
		w = nextWatch()
		if st.ResourceVersion() == 20 {
			break
		}
		if attempt == 5 {
			t.Fatalf("rv %d after the re-list, want 20", st.ResourceVersion())
		}
	}
	if _, _, n := st.Size(); n != 0 {
		t.Fatalf("%d objects after a re-list that has none", n)
	}
	evs, _, _, err := st.next(0)
	if err != nil || len(evs) != 2 || evs[1].typ != "DELETED" {
		t.Fatalf("window %+v %v: want MODIFIED then DELETED", evs, err)
	}
}
