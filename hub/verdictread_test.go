package hub

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"nodehub/hub/remote"
)

// A read the cloud holds while the health checker's verdict comes (no server is healthy) is
// answered from the cache exactly as the same read arriving offline is.
func TestProxyReadCancelledAtTheVerdictGetsTheOfflineAnswer(t *testing.T) {
	f := newProxyFixture(t, nil)
	const path = "/api/v1/namespaces/default/pods/web?resourceVersion=0"
	f.do(t, http.MethodGet, path, kubelet, "", "")
	if err := f.hub.cache.Writer.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	arrived := make(chan struct{}, 1)
	f.cloud.handle = func(w http.ResponseWriter, r *http.Request) bool {
		arrived <- struct{}{}
		<-r.Context().Done() // never answered: the link is gone
		return true
	}
	go func() { <-arrived; f.hub.state.set(remote.Unhealthy) }()
	held := f.do(t, http.MethodGet, path, kubelet, "", "")
	offline := f.do(t, http.MethodGet, path, kubelet, "", "")
	if held.code != http.StatusOK || held.code != offline.code || held.body != offline.body || held.header.Get("Content-Type") != offline.header.Get("Content-Type") {
		t.Fatalf("read cancelled at the verdict: %d %q %s\nthe same read offline: %d %q %s", held.code, held.header.Get("Content-Type"), held.body,
			offline.code, offline.header.Get("Content-Type"), offline.body)
	}
	if !strings.Contains(held.body, `"name":"web"`) {
		t.Fatalf("answer %s", held.body)
	}
}
