package hub

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"nodehub/cache"
)

// goroutines returns the stacks of the running goroutines by their header ("goroutine 7 [...]").
func goroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		head, _, _ := strings.Cut(string(g), " [")
		out[head] = string(g)
	}
	return out
}

// ours lists the packages of the module a goroutine runs in (its frames, not "created by").
func ours(stack string) (pkgs []string) {
	for _, line := range strings.Split(stack, "\n") {
		if strings.HasPrefix(line, "nodehub/") {
			pkg, _, _ := strings.Cut(strings.TrimPrefix(line, "nodehub/"), ".")
			pkgs = append(pkgs, pkg)
		}
	}
	return pkgs
}

// hubGoroutines are the goroutines started since before that run the module's code, but not the
// test's fake cloud.
func hubGoroutines(before map[string]string) map[string]string {
	out := map[string]string{}
	for id, stack := range goroutines() {
		if _, old := before[id]; old || len(ours(stack)) == 0 || strings.Contains(stack, "fakeCloud") {
			continue
		}
		out[id] = stack
	}
	return out
}

// Run owns every goroutine it starts: after it returns none of the hub's is left, and the cache
// is closed last, when nothing but Run itself and the cache's own writer runs.
func TestRunLeavesNoGoroutineAndClosesTheCacheLast(t *testing.T) {
	cloud := newFakeCloud(t)
	before := goroutines()
	cert := selfSigned(t)
	s, err := New(Config{
		NodeName: "node-a", Servers: []string{cloud.srv.URL}, Credentials: newTLSNodeCreds(t, cloud.srv),
		CacheDir: t.TempDir(), CachePolicy: cache.Policy{Agents: []string{"*"}}, Filters: filterConfig(),
		SecureAddrs: []string{"127.0.0.1:0"},
		ServingCert: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert, nil },
		Log:         slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	var atClose map[string]string
	s.beforeCacheClose = func() { atClose = hubGoroutines(before) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	for deadline := time.Now().Add(30 * time.Second); len(s.Addrs()) < 2 || len(s.SecureAddrs()) < 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			cancel()
			t.Fatal("the hub did not listen")
		}
	}
	resp, err := http.Get("http://" + s.Addrs()[0].String() + "/api/v1/namespaces/default/pods/web")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if n := len(hubGoroutines(before)); n < 10 {
		t.Fatalf("%d goroutines of the hub running: the parts did not start", n)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(StopTimeout + 20*time.Second):
		t.Fatal("Run did not return after its context ended")
	}

	if atClose == nil {
		t.Fatal("Run did not close the cache")
	}
	for id, stack := range atClose {
		// The cache's own goroutines (its writer may be inside wire's code) and Run itself.
		only := true
		for _, p := range ours(stack) {
			only = only && p == "cache"
		}
		cacheOwn := only || strings.Contains(stack, "\ncreated by nodehub/cache.")
		if !cacheOwn && !strings.Contains(stack, "nodehub/hub.(*Server).Run(") {
			t.Errorf("%s still ran when the cache was closed:\n%s", id, stack)
		}
	}
	// What Run waited for has returned; a goroutine may still be on its way out.
	left := hubGoroutines(before)
	for deadline := time.Now().Add(10 * time.Second); len(left) > 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		left = hubGoroutines(before)
	}
	for id, stack := range left {
		t.Errorf("%s outlived Run:\n%s", id, stack)
	}
}
