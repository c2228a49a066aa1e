package pool

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"nodehub/wire"
)

// fakeUpstream answers lists with a fixed body and watches with a stream the test writes to.
type fakeUpstream struct {
	mu      sync.Mutex
	list    string
	watches chan *io.PipeWriter
	paths   []string
	// watchList: the upstream serves watch-lists (the list's items as ADDED, then the
	// initial-events-end bookmark); else it refuses them with 422, as an apiserver without the
	// WatchList feature does.
	watchList bool
	// endMark is the initial-events-end annotation's value ("" is "true").
	endMark string
}

func (f *fakeUpstream) fetch(ctx context.Context, path string) (*http.Response, error) {
	f.mu.Lock()
	f.paths = append(f.paths, path)
	list := f.list
	f.mu.Unlock()
	h := http.Header{"Content-Type": {"application/json"}}
	if strings.Contains(path, "sendInitialEvents=true") {
		if !f.watchList {
			return &http.Response{StatusCode: 422, Status: "422 Unprocessable Entity", Header: h, Body: io.NopCloser(strings.NewReader(`{"kind":"Status","code":422}`))}, nil
		}
		var l struct {
			Metadata struct{ ResourceVersion string }
			Items    []json.RawMessage
		}
		if err := json.Unmarshal([]byte(list), &l); err != nil {
			return nil, err
		}
		pr, pw := io.Pipe()
		context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })
		go func() {
			for _, it := range l.Items {
				fmt.Fprintf(pw, `{"type":"ADDED","object":%s}`+"\n", it)
			}
			mark := cmp.Or(f.endMark, "true")
			fmt.Fprintf(pw, `{"type":"BOOKMARK","object":{"kind":"Service","apiVersion":"v1","metadata":{"resourceVersion":%q,"annotations":{"k8s.io/initial-events-end":%q}}}}`+"\n", l.Metadata.ResourceVersion, mark)
			f.watches <- pw
		}()
		return &http.Response{StatusCode: 200, Header: h, Body: pr}, nil
	}
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
	}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))

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

// Against an upstream that serves watch-lists the store never lists: its first sync and its
// re-sync after a 410 are each one watch-list, the re-sync "not older than" what the store holds;
// the new state reaches the store's watches as the difference (MODIFIED, ADDED, DELETED), kept
// whole in the window even past its bounds, so no watch is sent back to list.
func TestReflectorWatchListResyncsAsDifference(t *testing.T) {
	svc := func(name string, rv int) string {
		return fmt.Sprintf(`{"kind":"Service","apiVersion":"v1","metadata":{"name":%q,"namespace":"ns","resourceVersion":"%d"}}`, name, rv)
	}
	f := &fakeUpstream{watches: make(chan *io.PipeWriter, 4), watchList: true,
		list: `{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[` + svc("a", 5) + "," + svc("b", 6) + `]}`}
	st := NewStore(Resource{Version: "v1", Resource: "services"})
	st.MaxEvents = 1
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go st.run(ctx, func() (Upstream, <-chan struct{}) { return Upstream{Name: "cloud", Fetch: f.fetch}, nil }, nil,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	w := <-f.watches
	waitFor(t, "the initial events", func() bool { return st.Synced() && st.ResourceVersion() == 7 })
	_, _, cursor, _ := st.snapshot()

	f.mu.Lock()
	f.list = `{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"14"},"items":[` + svc("b", 12) + "," + svc("c", 13) + `]}`
	f.mu.Unlock()
	go w.Write([]byte(`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","code":410,"reason":"Expired"}}` + "\n"))
	<-f.watches
	waitFor(t, "the re-sync", func() bool { return st.ResourceVersion() == 14 })
	evs, _, _, err := st.next(cursor)
	var got []string
	for _, ev := range evs {
		got = append(got, ev.typ+" "+ev.obj.name)
	}
	if err != nil || strings.Join(got, ",") != "MODIFIED b,ADDED c,DELETED a" {
		t.Fatalf("the watches got %q (%v), want MODIFIED b, ADDED c, DELETED a", got, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.paths {
		if !strings.Contains(p, "watch=1") {
			t.Errorf("listed (%s): an upstream that serves watch-lists is never listed", p)
		}
	}
	if len(f.paths) != 2 || !strings.Contains(f.paths[1], "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=7") {
		t.Errorf("requests %q: want two watch-lists, the second not older than 7", f.paths)
	}
}

// Against an upstream without watch-lists the store lists: first from the watch cache
// (resourceVersion=0), after a 410 not older than what it holds.
func TestReflectorListQueries(t *testing.T) {
	st := NewStore(Resource{Version: "v1", Resource: "services"})
	if q := st.listQuery(); q != "resourceVersion=0" {
		t.Fatalf("first list %q", q)
	}
	st.replace(nil, 42, "v1", "Service")
	if q := st.listQuery(); q != "resourceVersion=42&resourceVersionMatch=NotOlderThan" {
		t.Fatalf("re-list %q", q)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within 30s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A shared store holds at most its bounds (issue 23: 400,000 tiny Services from the leader took
// 158 MiB on every follower). A list past them is dropped as it is read and the store is not
// served (its clients read the cloud); a watch that takes a served store past them empties it,
// its open watches expire, and it lists again.
func TestStoreIsBounded(t *testing.T) {
	list := func(n int) string {
		var b strings.Builder
		b.WriteString(`{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"100000"},"items":[`)
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"metadata":{"name":"s%d","namespace":"ns","resourceVersion":"%d"}}`, i, i+1)
		}
		b.WriteString("]}")
		return b.String()
	}
	run := func(st *Store, f *fakeUpstream) (chan error, context.CancelFunc) {
		failed := make(chan error, 16)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			st.run(ctx, func() (Upstream, <-chan struct{}) {
				return Upstream{Name: "leader", Fetch: f.fetch, Failed: func(err error) {
					select {
					case failed <- err:
					default:
					}
				}}, nil
			}, nil, slog.New(slog.DiscardHandler))
		}()
		return failed, func() { cancel(); <-done }
	}
	waitTooLarge := func(failed chan error) {
		t.Helper()
		for {
			select {
			case err := <-failed:
				if errors.Is(err, errTooLarge) {
					return
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the store did not go past its bounds")
			}
		}
	}

	// The default bounds: 60,000 tiny Services are not kept.
	f := &fakeUpstream{watches: make(chan *io.PipeWriter, 4), list: list(DefaultMaxObjects + 10000)}
	st := NewStore(Resource{Version: "v1", Resource: "services"})
	failed, stop := run(st, f)
	waitTooLarge(failed)
	stop()
	if _, _, n := st.Size(); st.Synced() || n != 0 {
		t.Fatalf("after a list of %d objects: synced %v, %d objects held", DefaultMaxObjects+10000, st.Synced(), n)
	}
	p := &Pool{stores: map[Resource]*Store{st.res: st}}
	if p.Store(request(t, "")) != nil {
		t.Fatal("a store past its bounds serves its clients")
	}

	// A watch past the bounds of a served store: emptied, watches expire, and it lists again.
	f = &fakeUpstream{watches: make(chan *io.PipeWriter, 4), list: list(90)}
	st = NewStore(Resource{Version: "v1", Resource: "services"})
	st.MaxObjects = 100
	failed, stop = run(st, f)
	defer stop()
	w := <-f.watches
	if !st.Synced() {
		t.Fatal("a list within the bounds is not served")
	}
	_, _, cursor, _ := st.snapshot()
	go func() {
		for i := 0; i < 20; i++ {
			fmt.Fprintf(w, `{"type":"ADDED","object":{"kind":"Service","apiVersion":"v1","metadata":{"name":"new%d","namespace":"ns","resourceVersion":"%d"}}}`+"\n", i, 200000+i)
		}
	}()
	waitTooLarge(failed)
	if _, _, _, err := st.next(cursor); err != ErrExpired {
		t.Fatalf("an open watch of the emptied store: %v, want ErrExpired", err)
	}
	if _, _, n := st.Size(); n > 100 {
		t.Fatalf("the store holds %d objects, past its bound of 100", n)
	}
	// It lists again (the resource fits once more): served again.
	f.mu.Lock()
	f.list = list(50)
	f.mu.Unlock()
	for deadline := time.Now().Add(60 * time.Second); !st.Synced(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the store did not list again once the resource fit")
		}
	}

	// The bytes bound.
	sb := NewStore(Resource{Version: "v1", Resource: "services"})
	sb.MaxBytes = 1000
	if sb.apply(wire.EventAdded, svc("a", 1, strings.Repeat("x", 2000))); sb.objBytes > 1000 {
		t.Fatalf("the store holds %d bytes past its bound of 1000", sb.objBytes)
	}
}

// A watch-list's end is the bookmark whose k8s.io/initial-events-end annotation says "true", as
// client-go's reflector reads it: one that names the annotation with another value does not end
// the initial events (the store lists instead of taking a partial list as whole).
func TestReflectorWatchListEndsOnlyAtTrue(t *testing.T) {
	f := &fakeUpstream{watches: make(chan *io.PipeWriter, 4), watchList: true, endMark: "false",
		list: `{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[{"kind":"Service","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"5"}}]}`}
	st := NewStore(Resource{Version: "v1", Resource: "services"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go st.run(ctx, func() (Upstream, <-chan struct{}) { return Upstream{Name: "cloud", Fetch: f.fetch}, nil }, nil,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	listed := func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, p := range f.paths {
			if !strings.Contains(p, "watch=1") {
				return true
			}
		}
		return false
	}
	waitFor(t, "a list after a watch-list whose end bookmark says false", func() bool { return listed() && st.Synced() })
}
