package local

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"nodehub/cache"
	"nodehub/wire"
)

// A list or watch-list of one shard (shardSelector) is never answered offline from what the
// cache holds of the whole collection: the cache cannot tell which objects the shard holds.
func TestOfflineShardedListIsNotAnsweredFromTheWholeList(t *testing.T) {
	st, err := cache.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	res := cache.Resource{Owner: "app", Version: "v1", Resource: "events"}
	for i := 0; i < 2; i++ {
		h, body := bigEvent(t, i, false)
		if err := st.Put(cache.Key{Resource: res, Namespace: "default", Name: h.Name}, h, body); err != nil {
			t.Fatal(err)
		}
	}
	p := &Proxy{Store: st}
	shard := "shardSelector=" + url.QueryEscape("shardRange(object.metadata.uid, '0x0', '0x8000000000000000')")
	for _, tc := range []struct {
		query string
		code  int
	}{
		{"", http.StatusOK},
		{"?" + shard, http.StatusServiceUnavailable},
		{"?" + shard + "&watch=1&sendInitialEvents=true&allowWatchBookmarks=true", http.StatusServiceUnavailable},
	} {
		// A watch answered from the cache would go on: the deadline ends it, and the test fails.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/api/v1/namespaces/default/events"+tc.query, nil)
		ri, err := wire.ParseRequest(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.CanAnswer(r, &Request{Info: ri, Own: "app"}); got != (tc.code == http.StatusOK) {
			t.Errorf("%q: CanAnswer %v", tc.query, got)
		}
		w := httptest.NewRecorder()
		p.ServeHTTP(w, r, &Request{Info: ri, Own: "app"})
		if w.Code != tc.code {
			t.Errorf("%q: %d, want %d", tc.query, w.Code, tc.code)
		}
	}
}

// Offline, a CBOR body (client-go preferring CBOR) is refused 415, after which client-go sends
// JSON: the cache keeps JSON and protobuf only.
func TestOfflineCBORBodyIsUnsupported(t *testing.T) {
	p := newProxy(t)
	r := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/default/events", strings.NewReader("\xd9\xd9\xf7"))
	r.Header.Set("Content-Type", "application/cbor")
	ri, err := wire.ParseRequest(r)
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	p.ServeHTTP(w, r, &Request{Info: ri, Own: "app", Shared: true})
	if w.Code != http.StatusUnsupportedMediaType {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
}
