package hub

import (
	"context"
	"sync"
)

// cloudState is whether the cloud is reachable (some server healthy), with what waits on it:
// offline watches end when it turns online, and proxied requests are cancelled when it turns
// offline (so their clients come back and land on the local proxy instead of hanging on a dead
// link).
type cloudState struct {
	mu      sync.Mutex
	online  bool
	changed chan struct{}
	period  context.Context // cancelled when the cloud turns offline
	cancel  context.CancelFunc
}

func newCloudState() *cloudState {
	s := &cloudState{online: true, changed: make(chan struct{})}
	s.period, s.cancel = context.WithCancel(context.Background())
	return s
}

// Online reports whether the cloud is reachable.
func (s *cloudState) Online() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.online
}

// Changed returns a channel closed at the next change.
func (s *cloudState) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// onlinePeriod returns a context that ends when the cloud next turns offline.
func (s *cloudState) onlinePeriod() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.period
}

// set records the state; it reports whether it changed.
func (s *cloudState) set(online bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if online == s.online {
		return false
	}
	s.online = online
	close(s.changed)
	s.changed = make(chan struct{})
	if online {
		s.period, s.cancel = context.WithCancel(context.Background())
	} else {
		s.cancel()
	}
	return true
}
