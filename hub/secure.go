package hub

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// secureRetry is how often a secure address that could not be bound is tried again (the
// dummy interface's address appears after the hub starts).
const secureRetry = 30 * time.Second

// serveSecure serves the HTTPS proxy port for pods on addr until ctx ends (a part of g). A bind
// failure is not fatal: the node's own clients use the plain port, so the hub keeps serving them
// and tries the address again every secureRetry (logged once, at warning for the main address).
func (s *Server) serveSecure(ctx context.Context, g *group, addr string, main bool) {
	var ln net.Listener
	for warned := false; ; warned = true {
		var err error
		// Addresses after the first (the hub's address on its own link) bind with IP_FREEBIND:
		// they answer as soon as the link has the address.
		if ln, err = listen(ctx, addr, !main); err == nil {
			break
		}
		if !warned {
			lvl := slog.LevelInfo
			if main {
				lvl = slog.LevelWarn
			}
			s.log.Log(ctx, lvl, "secure port: cannot listen yet; retrying", "addr", addr, "err", err, "every", secureRetry)
		}
		t := time.NewTimer(secureRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
	ln = s.boundConns(ln, "secure", true)
	hs := s.newHTTPServer(ctx, http.HandlerFunc(s.pipe.ServeBearer))
	hs.TLSConfig = &tls.Config{GetCertificate: s.cfg.ServingCert, MinVersion: tls.VersionTLS12}
	s.log.Info("listening", "port", "secure", "addr", ln.Addr().String())
	s.mu.Lock()
	s.secure = append(s.secure, ln.Addr())
	s.mu.Unlock()
	if err := s.serve(ctx, g, hs, ln); err != nil {
		s.log.Warn("secure port: stopped serving", "addr", addr, "err", err)
	}
}
