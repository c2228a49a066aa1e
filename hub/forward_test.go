package hub

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a log destination the test reads while the hub writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A watch the cloud cuts mid-stream leaves a trace: what the ReverseProxy logs goes to the hub's
// log at debug, not to io.Discard.
func TestProxyWatchCutMidStreamIsLoggedAtDebug(t *testing.T) {
	logs := &lockedBuffer{}
	f := newProxyFixture(t, func(c *Config) {
		c.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	f.cloud.handle = func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/api/v1/configmaps" || r.URL.Query().Get("watch") == "" {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"type":"ADDED","object":{"kind":"ConfigMap",`)
		w.(http.Flusher).Flush()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close() // the chunked body never ends
		}
		return true
	}
	req, _ := http.NewRequest(http.MethodGet, f.url+"/api/v1/configmaps?watch=true&resourceVersion=1", nil)
	req.Header.Set("User-Agent", kubelet)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body) // cut short, as the cloud's
	resp.Body.Close()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "ReverseProxy") {
		if time.Now().After(deadline) {
			t.Fatalf("no trace of the cut watch in the hub's log:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "level=DEBUG") {
		t.Fatalf("the ReverseProxy's log is not at debug:\n%s", logs.String())
	}
}
