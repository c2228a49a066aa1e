package hub

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"nodehub/cache"
)

// Offline, a credential the cloud never accepted creates nothing (every made-up token would be an
// owner with a quota of its own), and the offline creates of every credential but the node's own
// share one budget: 30 forged tokens × 12 events of 1 MiB, then four real ones (each pushing out its own oldest past its quota), cannot take more
// than cache.DefaultForeignBudget; past it a 403 "exceeded quota" Status (issue 23).
func TestProxyOfflineCreatesStayWithinOneBudget(t *testing.T) {
	f := newProxyFixture(t, nil)
	f.hub.cache.Store.SetWriteBudget(cache.WriteBudget{}) // the quotas alone, not the bytes a minute (issue 28)
	real := []string{"Bearer real-1", "Bearer real-2", "Bearer real-3", "Bearer real-4"}
	for i, tok := range real { // the cloud accepts them
		f.cloud.vouch(strings.TrimPrefix(tok, "Bearer "), fmt.Sprintf("user-%d", i))
		if a := f.do(t, http.MethodGet, "/api/v1/pods", "app/1.0", tok, ""); a.code != http.StatusOK {
			t.Fatalf("online list: %d %s", a.code, a.body)
		}
	}
	f.offline(t)
	ev := func(i int) string {
		b := make([]byte, 512<<10)
		_, _ = rand.Read(b)
		return fmt.Sprintf(`{"kind":"Event","apiVersion":"v1","metadata":{"name":"e-%d","namespace":"default"},"reason":"Flood","message":"%s"}`, i, hex.EncodeToString(b))
	}
	const events = "/api/v1/namespaces/default/events"
	for o := 0; o < 30; o++ {
		for i := 0; i < 12; i++ {
			a := f.do(t, http.MethodPost, events, "flooder/1.0", fmt.Sprintf("Bearer forged-%d", o), ev(i))
			if a.code != http.StatusServiceUnavailable || !strings.Contains(a.body, `"kind":"Status"`) {
				t.Fatalf("offline create with a credential the cloud never accepted: %d %.200s, want a 503 Status", a.code, a.body)
			}
		}
	}
	if got := f.hub.cache.Store.ForeignLocalBytes(); got != 0 {
		t.Fatalf("forged credentials' offline creates took %d bytes", got)
	}
	codes := map[int]int{}
	for _, tok := range real {
		for i := 0; i < 12; i++ {
			a := f.do(t, http.MethodPost, events, "app/1.0", tok, ev(i))
			codes[a.code]++
			if a.code != http.StatusCreated && (a.code != http.StatusForbidden || !strings.Contains(a.body, `"reason":"Forbidden"`) || !strings.Contains(a.body, "exceeded quota")) {
				t.Fatalf("offline create past the budget: %d %.300s, want 201 or a 403 Forbidden exceeded quota Status", a.code, a.body)
			}
		}
	}
	if codes[http.StatusForbidden] == 0 {
		t.Fatalf("4 credentials' 12 events of 1 MiB each: answers %v, want some refused past the budget", codes)
	}
	if got := f.hub.cache.Store.ForeignLocalBytes(); got > cache.DefaultForeignBudget {
		t.Fatalf("offline creates of credentials of their own take %d bytes, past the budget of %d", got, cache.DefaultForeignBudget)
	}
	// The node's own clients are not in that budget.
	if a := f.do(t, http.MethodPost, events, kubelet, "", ev(99)); a.code != http.StatusCreated {
		t.Fatalf("kubelet's offline event after the flood: %d %.200s", a.code, a.body)
	}
}

// A body that trickles in gets 408 on every route, the offline proxy's included (issue 23: an
// offline event create got 400, docs/security.md says 408).
func TestTricklingBodyOfflineIs408(t *testing.T) {
	f := newProxyFixture(t, func(c *Config) { c.BodyTimeout = 300 * time.Millisecond })
	if a := f.do(t, http.MethodGet, "/api/v1/namespaces/default/pods/web", kubelet, "", ""); a.code != http.StatusOK {
		t.Fatalf("online get: %d %s", a.code, a.body)
	}
	f.offline(t)
	for _, path := range []string{"/api/v1/namespaces/default/events", "/api/v1/namespaces/default/pods/web/status"} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(f.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		method := http.MethodPost
		if strings.HasSuffix(path, "/status") {
			method = http.MethodPatch
		}
		fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: hub\r\nUser-Agent: kubelet/v1\r\nContent-Type: application/merge-patch+json\r\nContent-Length: 1000\r\n\r\n{", method, path)
		stop := make(chan struct{})
		go func() { // one byte every 100 ms: never done in time
			for i := 0; i < 50; i++ {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}()
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		close(stop)
		if err != nil {
			t.Fatalf("%s %s: no answer to a trickling body: %v", method, path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		conn.Close()
		if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), `"kind":"Status"`) {
			t.Fatalf("offline %s %s with a trickling body: %d %s, want a 408 Status", method, path, resp.StatusCode, b)
		}
	}
}
