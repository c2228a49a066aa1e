package pool

import "sync/atomic"

// The event window's own bounds (MaxEvents, MaxEventBytes) do not take an event from an open
// watch that has not read it yet, up to holdFactor times those bounds: a burst on the return — a
// re-sync's difference, a resumed watch's backlog, a follower applying its leader's difference
// event by event — is read by every watch that keeps reading, however slow its client, and none
// ends in 410 for it. Past holdFactor times the bounds (or the store's bounds: window.go) the
// window trims past a watch, which then gets 410 Expired; a watch already behind the window holds
// nothing. A client that stops reading thus holds at most holdFactor windows, and only until its
// watch's write deadline (ServeWatch) ends the watch.

// holdFactor is how many times MaxEvents and MaxEventBytes open watches may hold the window to.
const holdFactor = 4

// reader is one open watch's place in the window: the cursor of the next event it reads.
type reader struct{ cursor atomic.Uint64 }

// addReader registers an open watch; until its cursor is set it holds the window from its
// oldest event.
func (s *Store) addReader() *reader {
	r := &reader{}
	s.mu.Lock()
	defer s.mu.Unlock()
	r.cursor.Store(s.first)
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

// unread reports whether an open watch has not read the window's oldest event yet; one that fell
// behind the window (it only gets 410) does not count (lock held).
func (s *Store) unread() bool {
	for r := range s.readers {
		if r.cursor.Load() == s.first {
			return true
		}
	}
	return false
}
