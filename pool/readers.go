package pool

import "sync/atomic"

// The event window's own bounds (MaxEvents, MaxEventBytes) never take an event from an open
// watch that has not read it yet: a burst on the return — a re-sync's difference, a resumed
// watch's backlog, a follower applying its leader's difference event by event — is read by
// every watch, however slow its client, and none ends in 410 for it. Only the store's bounds
// (MaxObjects, MaxBytes, with what the window alone keeps: window.go) trim past a watch, which
// then gets 410 Expired: a client that stopped reading holds no more than the store's bound.

// reader is one open watch's place in the window: the cursor of the next event it reads.
type reader struct{ cursor atomic.Uint64 }

// addReader registers an open watch; until its cursor is set it holds the whole window.
func (s *Store) addReader() *reader {
	r := &reader{}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.readers == nil {
		s.readers = map[*reader]struct{}{}
	}
	s.readers[r] = struct{}{}
	return r
}

// removeReader forgets a watch that ended.
func (s *Store) removeReader(r *reader) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.readers, r)
}

// unread reports whether an open watch has not read the window's oldest event yet (lock held).
func (s *Store) unread() bool {
	for r := range s.readers {
		if r.cursor.Load() <= s.first {
			return true
		}
	}
	return false
}
