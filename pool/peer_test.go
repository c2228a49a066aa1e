package pool

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A follower's traffic with its leader over the pool port (TLS aside): the follower syncs by one
// watch-list, follows the leader's changes, and through a region-wide cut — the leader answers
// 503 with Retry-After while it cannot reach the cloud — keeps asking the leader (never the
// unreachable cloud), then resumes from its resourceVersion and gets the leader's re-sync as
// events.
func TestFollowerReadsFromTheLeaderThroughACut(t *testing.T) {
	res := Resource{Version: "v1", Resource: "services"}
	var leaderOnline atomic.Bool
	leaderOnline.Store(true)
	leader, err := New(Config{Resources: []Resource{res}, Mode: ModeLease, NodeName: "edge-1", PoolName: "p", Addr: "10.0.0.1:10269",
		LeaderTimeout: time.Second, Online: leaderOnline.Load,
		Cloud: func(*http.Request) (*http.Response, error) { return nil, fmt.Errorf("not in this test") }})
	if err != nil {
		t.Fatal(err)
	}
	leader.setLeader("edge-1@10.0.0.1:10269", true)
	ls := leader.stores[res]
	ls.replace([]*object{svc("a", 5, "x"), svc("b", 6, "x")}, 7, "v1", "Service")

	var mu sync.Mutex
	var paths []string
	var codes []int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &codeRecorder{ResponseWriter: w}
		leader.ServeHTTP(rec, r)
		mu.Lock()
		paths, codes = append(paths, r.URL.RequestURI()), append(codes, rec.code)
		mu.Unlock()
	}))
	defer srv.Close()
	fetch := func(ctx context.Context, path string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Accept", "application/json")
		return srv.Client().Do(req)
	}
	fs := NewStore(res)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		fs.run(ctx, func() (Upstream, <-chan struct{}) {
			return Upstream{Name: "edge-1", Fetch: fetch, Silence: time.Second}, nil
		}, nil, slog.New(slog.DiscardHandler))
	}()
	defer func() { cancel(); <-done }()

	waitFor(t, "the follower's first sync", func() bool { return fs.Synced() && fs.ResourceVersion() == 7 })
	ls.apply("MODIFIED", svc("a", 9, "y"))
	waitFor(t, "the leader's change at the follower", func() bool { return fs.ResourceVersion() == 9 })
	_, _, cursor, _ := fs.snapshot()

	// The cut: the leader cannot reach the cloud; it ends its followers' watches and answers 503.
	leaderOnline.Store(false)
	waitFor(t, "the leader's 503 to its follower", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(codes) > 0 && codes[len(codes)-1] == http.StatusServiceUnavailable
	})
	// Back: the leader re-synced from the cloud (b changed, a gone, c new) and serves again.
	ls.replace([]*object{svc("b", 12, "x"), svc("c", 13, "x")}, 14, "v1", "Service")
	leaderOnline.Store(true)
	waitFor(t, "the follower carried on from the leader", func() bool { return fs.ResourceVersion() == 14 })
	evs, _, _, err := fs.next(cursor)
	var got []string
	for _, ev := range evs {
		got = append(got, ev.typ+" "+ev.obj.name)
	}
	if err != nil || strings.Join(got, ",") != "MODIFIED b,ADDED c,DELETED a" {
		t.Fatalf("the follower's watches got %q (%v), want the leader's difference", got, err)
	}
	mu.Lock()
	defer mu.Unlock()
	initial := 0
	for _, p := range paths {
		if strings.Contains(p, "sendInitialEvents=true") {
			initial++
		}
		if !strings.Contains(p, "watch=1") {
			t.Errorf("the follower listed (%s): it syncs by watch-list and resumes", p)
		}
	}
	if initial != 1 {
		t.Errorf("%d watch-lists, want the first sync's only: %q", initial, paths)
	}
	if last := paths[len(paths)-1]; !strings.Contains(last, "resourceVersion=9") {
		t.Errorf("the follower resumed with %s, want from resourceVersion 9", last)
	}
}

type codeRecorder struct {
	http.ResponseWriter
	code int
}

func (c *codeRecorder) WriteHeader(code int) {
	if c.code == 0 {
		c.code = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *codeRecorder) Write(b []byte) (int, error) {
	if c.code == 0 {
		c.code = http.StatusOK
	}
	return c.ResponseWriter.Write(b)
}

func (c *codeRecorder) Flush() { c.ResponseWriter.(http.Flusher).Flush() }

// Hubs of one machine (pool addresses 127.0.1.x) dial their leader from their own pool address:
// from 127.0.0.1, all of them, the leader's bound per address refused most of a pool of 100.
func TestFollowersOfOneMachineDialFromTheirPoolAddress(t *testing.T) {
	for self, want := range map[string]string{"127.0.1.5:10269": "127.0.1.5:0", "10.0.0.5:10269": "<nil>", "127.0.0.1:10269": "<nil>", "[::1]:10269": "<nil>", "bad": "<nil>"} {
		if got := fmt.Sprint(dialFrom(self)); got != want {
			t.Errorf("pool address %s: dials from %s, want %s", self, got, want)
		}
	}
	ln, err := net.Listen("tcp", "127.0.1.9:0")
	if err != nil {
		t.Skip("no 127.0.1.9 here:", err)
	}
	defer ln.Close()
	d := net.Dialer{LocalAddr: dialFrom("127.0.1.7:1")}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if host, _, _ := net.SplitHostPort(s.RemoteAddr().String()); host != "127.0.1.7" {
		t.Fatalf("the leader sees the follower at %s, want 127.0.1.7", host)
	}
}
