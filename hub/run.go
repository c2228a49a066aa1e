package hub

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"

	"nodehub/hub/endpointfix"
	"nodehub/hub/lane"
	"nodehub/pool"
)

// Run listens on the hub's ports and runs its parts until ctx ends or a part fails: the servers
// (proxy, hub, pool and secure ports), the health checker, identities, tokens, the autonomy
// writer, the topology source, the pool, GC, the hub's link, the endpoint fixer and main's parts
// (Config.Parts). Each is one func(ctx) error in one group (group.go): the first error stops them
// all, and Run returns once every part has returned. Stopping, the servers stop accepting and
// their in-flight requests end (their context is gone, so watches end at once), identities and
// tokens are saved, and the cache, closed last, writes what waits and syncs: all by one
// deadline, StopTimeout after the stop began.
func (s *Server) Run(ctx context.Context) error {
	ports := s.ports()
	lns, err := listenAll(ctx, ports)
	if err != nil {
		if s.cache != nil {
			_ = s.cache.Close(ctx)
		}
		return err
	}
	g := newGroup(ctx, StopTimeout)
	defer g.release()
	// The cache runs beside the group and stops after it: it is closed last, when nothing can
	// write into it any more.
	cacheCtx, stopCache := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCache()
	cacheDone := make(chan struct{})
	if s.cache != nil {
		go func() {
			defer close(cacheDone)
			s.cache.Run(cacheCtx, s.cfg.CacheSyncInterval, s.log)
		}()
	} else {
		close(cacheDone)
	}
	s.servePorts(g, ports, lns)
	s.runParts(g)

	err = g.Wait()
	s.ids.Save()
	if err := s.tokens.SaveAll(); err != nil {
		s.log.Warn("tokens: save at stop", "err", err)
	}
	if s.dummy != nil && s.cfg.DummyIf.Cleanup {
		if err := s.dummy.Remove(); err != nil {
			s.log.Warn("could not remove the hub's link", "err", err)
		}
	}
	stopCache()
	<-cacheDone
	if s.cache != nil {
		if s.beforeCacheClose != nil {
			s.beforeCacheClose()
		}
		if err := s.cache.Close(g.stopContext()); err != nil {
			s.log.Warn("cache: not everything was written before the stop", "err", err)
		}
	}
	return err
}

// port is one port the hub serves with its own listener (the secure ports bind on their own).
type port struct {
	name, addr string
	h          http.Handler
	freebind   bool        // the address may not be on the node yet (the dummy link comes later)
	tls        *tls.Config // served over TLS (the pool port)
}

// ports are the proxy port (also on the extra hosts), the hub port and a leader's pool port.
func (s *Server) ports() []port {
	proxyHandler := s.pipe
	ports := []port{
		{name: "proxy", addr: s.cfg.ProxyAddr, h: proxyHandler},
		{name: "hub", addr: s.cfg.HubAddr, h: s.hubMux()},
	}
	// A port bound to the unspecified address already gets the extra hosts' connections (and a
	// second listener on the same port would fail).
	if bind, p, err := net.SplitHostPort(s.cfg.ProxyAddr); err == nil && !net.ParseIP(bind).IsUnspecified() {
		for _, host := range s.cfg.ExtraHosts() {
			ports = append(ports, port{name: "proxy", addr: net.JoinHostPort(host, p), h: proxyHandler, freebind: true})
		}
	}
	if addr := s.pool.PeerAddr(); addr != "" {
		// Followers (other nodes, one connection each) read the leader's stores here.
		ports = append(ports, port{name: "pool", addr: addr, h: s.pool, tls: s.pool.PeerTLS()})
	}
	return ports
}

// listenAll binds every port before any part starts (with IP_FREEBIND where the hub's link may
// not have its address yet): a port that cannot be bound fails Run with nothing started.
func listenAll(ctx context.Context, ports []port) ([]net.Listener, error) {
	lns := make([]net.Listener, 0, len(ports))
	for _, p := range ports {
		ln, err := listen(ctx, p.addr, p.freebind)
		if err != nil {
			for _, ln := range lns {
				ln.Close()
			}
			return nil, fmt.Errorf("hub: %s port: %w", p.name, err)
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// servePorts adds a part to g for each port and each secure address.
func (s *Server) servePorts(g *group, ports []port, lns []net.Listener) {
	for i, p := range ports {
		ln := lns[i]
		hs := s.newHTTPServer(g.ctx, p.h)
		s.log.Info("listening", "port", p.name, "addr", ln.Addr().String())
		if p.tls != nil {
			// The pool port: no client of the node's own comes here, so loopback is bounded too.
			// The TLS handshake has the header's deadline (http.Server's, ReadHeaderTimeout).
			ln = s.boundConns(ln, p.name, false)
			hs.TLSConfig = p.tls
		} else {
			ln = s.boundConns(ln, p.name, true)
			s.mu.Lock()
			s.listeners = append(s.listeners, ln)
			s.mu.Unlock()
		}
		if p.name == "proxy" {
			// The node's clients' short GETs on the lane (hub/lane), the rest on hs.
			l := lane.New(g.ctx, hs, s.log, ln.Addr())
			g.Go(p.name+" port", func(ctx context.Context) error { return s.serveLane(ctx, g, l, ln) })
			continue
		}
		g.Go(p.name+" port", func(ctx context.Context) error { return s.serve(ctx, g, hs, ln) })
	}
	for i, addr := range s.cfg.SecureAddrs {
		g.Go("secure port", func(ctx context.Context) error { s.serveSecure(ctx, g, addr, i == 0); return nil })
	}
}

// runParts adds the hub's other parts to g, and main's.
func (s *Server) runParts(g *group) {
	if s.dummy != nil {
		g.Go("link", func(ctx context.Context) error { s.dummy.Run(ctx); return nil })
	}
	for _, p := range s.cfg.Parts {
		p.bytes.attach(s.metrics, "certs")
		g.Go(p.Name, p.Run)
	}
	s.state.begin(time.Now())
	g.Go("health checker", func(ctx context.Context) error { s.checker.Run(ctx, s.balancer.Backends); return nil })
	g.Go("identities", func(ctx context.Context) error { s.ids.Run(ctx); return nil })
	g.Go("tokens", func(ctx context.Context) error { s.tokens.Run(ctx); return nil })
	if s.auto != nil {
		g.Go("autonomy", func(ctx context.Context) error { s.auto.Run(ctx); return nil })
	}
	if s.fix != nil && s.pool != nil && s.cfg.Pool.Mode != pool.ModeOff {
		g.Go("endpoint reports", func(ctx context.Context) error { s.shareReports(ctx); return nil })
	}
	if s.fix != nil {
		g.Go("endpoint fixer", func(ctx context.Context) error {
			s.fix.Run(ctx, endpointfix.Link{Online: s.state.Online, Changed: s.state.Changed, OnLost: s.findGone,
				Lost: s.state.unreachable})
			return nil
		})
	}
	if s.filters.Uses("servicetopology") {
		g.Go("topology", func(ctx context.Context) error { s.topo.Run(ctx); return nil })
	}
	if s.cache != nil {
		g.Go("cache gc", func(ctx context.Context) error { s.runGC(ctx); return nil })
	}
	if s.pool != nil {
		g.Go("pool", func(ctx context.Context) error { s.pool.Run(ctx, g.stopContext); return nil }) // a leader releases its lease by the stop deadline
	}
	if s.cfg.Started != nil {
		g.Go("start-up", func(ctx context.Context) error { s.started(ctx); return nil })
	}
}

// serve serves hs on ln until ctx ends, then shuts it down by the stop deadline (closing the
// connections still open then). A server that fails stops the hub.
func (s *Server) serve(ctx context.Context, g *group, hs *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() {
		if hs.TLSConfig != nil {
			errc <- hs.ServeTLS(ln, "", "")
		} else {
			errc <- hs.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	if hs.Shutdown(g.stopContext()) != nil {
		_ = hs.Close()
	}
	<-errc
	return nil
}

// serveLane serves a proxy port through its fast lane until ctx ends, then shuts it down as serve
// does.
func (s *Server) serveLane(ctx context.Context, g *group, l *lane.Lane, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- l.Serve(ln) }()
	select {
	case err := <-errc:
		// The port failed (not a temporary failure: those the lane waits out): the hub stops;
		// the connections the lane still serves get the stop's time.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.timeout)
		defer cancel()
		l.Shutdown(sctx)
		return err
	case <-ctx.Done():
	}
	ln.Close()
	l.Shutdown(g.stopContext())
	<-errc
	return nil
}
