package hub

import "net"

// Addrs returns the addresses the plain ports listen on (proxy first), once Run has bound them.
func (s *Server) Addrs() []net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]net.Addr, len(s.listeners))
	for i, ln := range s.listeners {
		out[i] = ln.Addr()
	}
	return out
}

// SecureAddrs returns the secure ports' bound addresses.
func (s *Server) SecureAddrs() []net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]net.Addr(nil), s.secure...)
}
