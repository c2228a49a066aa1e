package hub

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A Config with nothing but Servers set (and a cache directory, whose zero intervals used to stop
// time.NewTicker) builds a hub that runs: it listens on loopback, answers its endpoints and the
// proxy port, and stops cleanly.
func TestZeroConfigRuns(t *testing.T) {
	cloud := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":404,"reason":"NotFound"}`)
	}))
	defer cloud.Close()
	for _, tt := range []struct {
		name string
		cfg  Config
	}{
		{"servers only", Config{Servers: []string{cloud.URL}}},
		{"with a cache", Config{Servers: []string{cloud.URL}, CacheDir: t.TempDir()}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
			s, err := New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			var addrs []string
			for deadline := time.Now().Add(30 * time.Second); len(addrs) < 2; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the hub did not listen")
				}
				addrs = addrs[:0]
				for _, a := range s.Addrs() {
					addrs = append(addrs, a.String())
				}
			}
			get := func(url string) int {
				resp, err := http.Get(url)
				if err != nil {
					t.Fatalf("GET %s: %v", url, err)
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			if code := get("http://" + addrs[1] + "/v1/healthz"); code != http.StatusOK {
				t.Errorf("healthz %d", code)
			}
			if code := get("http://" + addrs[1] + "/v1/readyz"); code != http.StatusOK && code != http.StatusServiceUnavailable {
				t.Errorf("readyz %d", code)
			}
			if code := get("http://" + addrs[0] + "/api/v1/namespaces/default/pods/x"); code != http.StatusNotFound {
				t.Errorf("proxied get: %d, want the cloud's 404", code)
			}
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("Run did not return after the context ended")
			}
		})
	}
}

// The defaults are applied in one place and are the documented ones.
func TestSetDefaults(t *testing.T) {
	c := Config{Servers: []string{"10.0.0.1:6443"}, RootDir: "/r"}
	c.setDefaults()
	if c.NodeName == "" || c.LBMode != RoundRobin || c.ProxyAddr != "127.0.0.1:0" || c.HubAddr != "127.0.0.1:0" ||
		c.HeartbeatInterval != 10*time.Second || c.HeartbeatTimeout != 2*time.Second || c.HeartbeatFailed != 3 ||
		c.HeartbeatHealthy != 2 || c.KubeletGracePeriod != 40*time.Second || c.Credentials == nil ||
		c.CacheSyncInterval != time.Second || c.GCFrequency != 120*time.Minute || c.Pool.Mode != "off" ||
		c.Pool.LeaseNamespace != "kube-node-lease" || c.Pool.LeaderTimeout != 5*time.Second {
		t.Fatalf("defaults: %+v", c)
	}
	if err := c.Credentials.Err(); err != nil {
		t.Fatalf("no credentials are not an error: %v", err)
	}
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without Servers: no error")
	}
	if _, err := New(Config{Servers: []string{"10.0.0.1:6443"}, SecureAddrs: []string{"127.0.0.1:0"}}); err == nil {
		t.Fatal("New with SecureAddrs and no ServingCert: no error")
	}
}
