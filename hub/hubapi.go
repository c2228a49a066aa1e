package hub

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"nodehub/hub/serve"
)

// hubMux serves the hub's own endpoints on --bind-address:--serve-port, guarded by loopbackOnly.
func (s *Server) hubMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "OK")
	})
	mux.HandleFunc("GET /v1/readyz", s.readyz)
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = s.metrics.reg.WriteTo(w)
	})
	mux.HandleFunc("DELETE /v1/cache/{component}", s.dropCache)
	mux.HandleFunc("POST /v1/token", s.updateToken)
	s.ota.Register(mux)
	if s.cfg.Profiling {
		mux.HandleFunc("GET /debug/pprof/", servePprof)
	}
	return s.loopbackOnly(mux)
}

// loopbackOnly guards the hub API: when --bind-address is wider than loopback, a request from
// another address gets /v1/healthz and /v1/readyz (and /metrics with --allow-remote-metrics) and
// a 403 for everything else: dropping caches, replacing the join token, OTA upgrades, the pod
// list and pprof are for the node itself.
func (s *Server) loopbackOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if serve.FromLoopback(r) || r.Method == http.MethodGet && (r.URL.Path == "/v1/healthz" || r.URL.Path == "/v1/readyz" ||
			r.URL.Path == "/metrics" && s.cfg.RemoteMetrics) {
			h.ServeHTTP(w, r)
			return
		}
		s.metrics.unauthorized.Inc("hub")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintln(w, "nodehub: the hub API answers only the node itself (loopback)")
	})
}

// readyz is 200 when the node's credentials are loaded, some cloud server answered once, and the
// filters' data is loaded (topologyReady), as YurtHub holds readiness until its filters' informers
// synced.
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	var reasons []string
	if err := s.cfg.Credentials.Err(); err != nil {
		reasons = append(reasons, err.Error())
	}
	reached := s.state.answeredOnce()
	if !reached && s.cache != nil && len(s.cache.Store.Owners()) > 0 {
		reached = true // offline with a cache: the node is served from it
	}
	if !reached {
		msg := "no cloud server reached yet"
		for _, b := range s.balancer.Backends {
			if err := b.LastError(); err != nil {
				msg += fmt.Sprintf("; %s: %v", b.Name, err)
			}
		}
		reasons = append(reasons, msg)
	}
	if why := s.pool.Stale(); why != "" {
		reasons = append(reasons, why) // its clients get what it holds, and it lists again
	}
	if !s.topologyReady() {
		reasons = append(reasons, "the servicetopology filter's topology (services, the pool's nodes) is not loaded yet")
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	// The hub's address on the node is a detail, not a reason: proxying on loopback goes on.
	dummyNote := ""
	if s.dummy != nil {
		if err := s.dummy.Err(); err != nil {
			dummyNote = fmt.Sprintf("hub address %s on %s not in place (pods cannot reach the hub there): %v\n", s.dummy.IP, s.dummy.Name, err)
		}
	}
	if len(reasons) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, strings.Join(reasons, "\n"))
		fmt.Fprint(w, dummyNote)
		return
	}
	fmt.Fprintln(w, "OK")
	fmt.Fprint(w, dummyNote)
	if s.cfg.ServingCert != nil {
		if _, err := s.cfg.ServingCert(nil); err != nil {
			fmt.Fprintln(w, "secure port: no serving certificate yet (its kubernetes.io/kubelet-serving CSR awaits approval); pods cannot use the hub until then")
		}
	}
	if _, why := s.pool.Degraded(); why != "" {
		fmt.Fprintln(w, why) // the node is served all the same, sharing on the node only
	}
	if s.cache != nil {
		if ro, why := s.cache.Store.ReadOnly(); ro {
			fmt.Fprintf(w, "cache read-only (%s): answering offline from what it holds, caching nothing new\n", why)
		}
	}
	if s.cache != nil && s.cfg.CacheMaxBytes > 0 && s.cache.Store.Size() >= s.cfg.CacheMaxBytes {
		fmt.Fprintf(w, "cache full: %d of %d bytes; new objects are not cached\n", s.cache.Store.Size(), s.cfg.CacheMaxBytes)
	}
}

// topologyReady reports whether the filters' data is loaded: the topology when servicetopology is
// in use. Offline it does not hold readiness (offline answers come from the cache, which holds
// filtered answers).
func (s *Server) topologyReady() bool {
	if !s.filters.Uses("servicetopology") {
		return true
	}
	select {
	case <-s.topo.Synced():
		return true
	default:
		return s.state.unreachable()
	}
}

// dropCache removes one component's whole cache: DELETE /v1/cache/<component>.
func (s *Server) dropCache(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if s.cache == nil {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintln(w, `{"error":"caching is disabled"}`)
		return
	}
	comp := r.PathValue("component")
	n, err := s.cache.Store.DropOwner(comp)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, "{\"error\":%q}\n", err.Error())
		return
	}
	s.log.Info("cache dropped", "component", comp, "directories", n)
	fmt.Fprintf(w, "{\"component\":%q,\"removed\":%d}\n", comp, n)
}

// updateToken replaces the join token: POST /v1/token with {"jointoken":"abcdef.0123456789abcdef"}
// (YurtHub's body) or the token as plain text. A node whose certificate and token both expired
// while offline bootstraps again with it.
func (s *Server) updateToken(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if s.cfg.SetToken == nil {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintln(w, `{"error":"the node's certificate is not bootstrapped by token (--bootstrap-mode=token with --join-token)"}`)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 4096))
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, "{\"error\":%q}\n", err.Error())
		return
	}
	tok := strings.TrimSpace(string(body))
	var js map[string]string
	if json.Unmarshal(body, &js) == nil {
		tok = strings.TrimSpace(js["jointoken"])
	}
	if err := s.cfg.SetToken(tok); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, "{\"error\":%q}\n", "jointoken: "+err.Error())
		return
	}
	s.log.Info("join token replaced")
	fmt.Fprintln(w, `{"result":"join token updated"}`)
}
