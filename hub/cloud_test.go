package hub

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"nodehub/hub/remote"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"nodehub/listwatch"
)

// The hub's own readers read the cloud as the node while it is reachable, and the same list back
// from the cache (cached as the hub's own) while it is not; an offline watch waits for the cloud.
func TestOwnFetchCloudThenCache(t *testing.T) {
	const list = `{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"9"},"items":[{"metadata":{"namespace":"default","name":"web","resourceVersion":"8"}}]}`
	var mu sync.Mutex
	var got []string
	asked := func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(got) }
	cloud := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.URL.RequestURI()+" "+r.Header.Get("User-Agent"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, list)
	}))
	defer cloud.Close()
	s, err := New(Config{Servers: []string{cloud.URL}, CacheDir: t.TempDir(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	fetch := s.ownFetch("topology")
	names := func() []string {
		var out []string
		meta, err := listwatch.List(context.Background(), fetch, "/api/v1/services", func(raw []byte) error {
			out = append(out, string(raw))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return append(out, "rv="+meta.ResourceVersion)
	}
	s.state.set(remote.Healthy)
	online := names()
	if a := asked(); len(a) != 1 || a[0] != "/api/v1/services nodehub/topology" {
		t.Fatalf("the cloud got %q", a)
	}
	if err := s.cache.Writer.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.state.set(remote.Unhealthy)
	offline := names()
	if a := asked(); len(a) != 1 {
		t.Fatalf("offline, the cloud was asked: %q", a)
	}
	if len(offline) != 2 || !strings.Contains(offline[0], `"name":"web"`) || len(online) != 2 {
		t.Fatalf("online %q, offline (from the cache) %q", online, offline)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := fetch(ctx, "/api/v1/services?watch=true&resourceVersion=9"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an offline watch: %v, want to wait for the cloud", err)
	}
}
