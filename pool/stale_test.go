package pool

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// behind is an upstream whose resourceVersions are below the store's (an etcd restored, another
// cluster): a list or watch-list not older than the store's answers "Too large resource
// version"; a watch from it answers 200 and says nothing, as a real apiserver does; the current
// state is listed at resourceVersion 120.
type behind struct {
	mu     sync.Mutex
	paths  []string
	hold   chan struct{} // when set, the current state's watch-list waits for it
	silent chan *io.PipeWriter
}

const tooLargeStatus = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Timeout: Too large resource version: 9000, current: 120","reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":1},"code":504}`

func (b *behind) fetch(ctx context.Context, path string) (*http.Response, error) {
	b.mu.Lock()
	b.paths = append(b.paths, path)
	hold := b.hold
	b.mu.Unlock()
	h := http.Header{"Content-Type": {"application/json"}}
	pr, pw := io.Pipe()
	context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })
	switch {
	case strings.Contains(path, "resourceVersion=9000") && strings.Contains(path, "NotOlderThan"):
		return &http.Response{StatusCode: 504, Status: "504 Gateway Timeout", Header: h, Body: io.NopCloser(strings.NewReader(tooLargeStatus))}, nil
	case strings.Contains(path, "sendInitialEvents=true"):
		go func() {
			if hold != nil {
				<-hold
			}
			fmt.Fprintf(pw, `{"type":"ADDED","object":%s}`+"\n", svc("new", 110, "x").raw)
			fmt.Fprint(pw, `{"type":"BOOKMARK","object":{"kind":"Service","apiVersion":"v1","metadata":{"resourceVersion":"120","annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n")
		}()
	default:
		b.silent <- pw
	}
	return &http.Response{StatusCode: 200, Header: h, Body: pr}, nil
}

func aheadStore(t *testing.T) *Store {
	st := NewStore(Resource{Version: "v1", Resource: "services"})
	st.replace([]*object{svc("old", 8990, "x")}, 9000, "v1", "Service")
	return st
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A store that read a leader whose resourceVersions are ahead of the cloud's, then the cloud:
// it lists the cloud again (not older than what it holds), is told "Too large resource version",
// and lists the cloud's current state; its clients' watches get 410 and list again from it.
func TestStoreAheadOfItsNewUpstreamListsItsState(t *testing.T) {
	st := aheadStore(t)
	st.switchTo("leader")
	_, _, cursor, _ := st.snapshot()
	up := &behind{silent: make(chan *io.PipeWriter, 8)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		st.run(ctx, func() (Upstream, <-chan struct{}) { return Upstream{Name: "cloud", Fetch: up.fetch}, nil }, nil, quiet())
	}()
	waitFor(t, "the cloud's state", func() bool { return st.ResourceVersion() == 120 })
	objs, _, _, _ := st.snapshot()
	if len(objs) != 1 || objs[0].name != "new" || st.Stale() != "" {
		t.Fatalf("store holds %d objects (%v), stale %q", len(objs), objs, st.Stale())
	}
	if _, _, _, err := st.next(cursor); err != ErrExpired {
		t.Fatalf("an open watch of the old timeline: %v, want ErrExpired", err)
	}
	if code, _ := watchBody(t, st, "resourceVersion=9000"); code != http.StatusGone {
		t.Fatalf("a watch from the old timeline's resourceVersion: %d, want 410", code)
	}
	cancel()
	<-done
}

type fakeTimer struct{ fire func() }

func (fakeTimer) Stop() bool               { return true }
func (fakeTimer) Reset(time.Duration) bool { return true }

// A watch of an upstream that sends bookmarks, silent for staleAfter (a watch from a
// resourceVersion the apiserver has not reached: 200, nothing), marks the store stale and lists
// the upstream's current state.
func TestStoreWatchWithoutBookmarksListsAgain(t *testing.T) {
	st := aheadStore(t)
	timers := make(chan fakeTimer, 8)
	st.afterFunc = func(d time.Duration, f func()) timer {
		if d != staleAfter {
			t.Errorf("watchdog of %v", d)
		}
		ft := fakeTimer{fire: f}
		timers <- ft
		return ft
	}
	up := &behind{silent: make(chan *io.PipeWriter, 8), hold: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		st.run(ctx, func() (Upstream, <-chan struct{}) { return Upstream{Name: "cloud", Fetch: up.fetch}, nil }, nil, quiet())
	}()
	// The upstream sends bookmarks (before its etcd was restored); the watch times out.
	w := <-up.silent
	fmt.Fprint(w, `{"type":"BOOKMARK","object":{"kind":"Service","apiVersion":"v1","metadata":{"resourceVersion":"9000"}}}`+"\n")
	w.Close()
	<-up.silent // the next watch, from 9000: nothing comes
	select {
	case ft := <-timers:
		ft.fire()
	case <-time.After(30 * time.Second):
		t.Fatal("no watchdog on a watch of an upstream that sends bookmarks")
	}
	waitFor(t, "stale", func() bool { return st.Stale() != "" })
	p := &Pool{stores: map[Resource]*Store{st.res: st}}
	if why := p.Stale(); !strings.Contains(why, "stale") {
		t.Fatalf("Pool.Stale: %q", why)
	}
	close(up.hold)
	waitFor(t, "the upstream's state", func() bool { return st.ResourceVersion() == 120 && st.Stale() == "" })
	cancel()
	<-done
}
