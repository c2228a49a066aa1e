package pool

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"time"

	"nodehub/listwatch"
	"nodehub/wire"
)

// A store ahead of its upstream stays stale for good if nothing notices: a watch from a
// resourceVersion the apiserver has not reached (after an etcd restore, or a leader that sent a
// large one) is answered 200 and says nothing, and a list "not older than" it fails with
// "Too large resource version". The store notices it three ways, marks itself stale (readyz says
// so) and lists the upstream's current state, whatever its resourceVersion:
//   - the upstream says "Too large resource version" (504, reason Timeout, cause
//     ResourceVersionTooLarge), to a list, a watch or in a watch's stream;
//   - a watch of an upstream that sends BOOKMARKs (an apiserver, about every minute; a leader,
//     every second) receives nothing for staleAfter;
//   - the store changes upstream (from a leader to the cloud, another leader): it lists from the
//     new one (not older than what it holds), which says "too large" if it is behind.
// A state listed at a lower resourceVersion than the store's starts a new timeline: the event
// window goes (every watch gets 410 and lists again, from the store), and a watch from a
// resourceVersion of the old timeline the new one has not reached gets 410 too.

// staleAfter is how long a watch of an upstream that sends bookmarks may receive nothing before
// the store takes itself for ahead of its upstream: three of the apiserver's bookmarks.
const staleAfter = 3 * time.Minute

// errAhead: the store is ahead of its upstream and lists again (not the upstream's fault).
var errAhead = errors.New("pool: the store is ahead of its upstream")

// errNoBookmark ends a watch that received nothing for staleAfter.
var errNoBookmark = errors.New("pool: no bookmark from the upstream for " + staleAfter.String())

// timer is what the store's watchdog needs of a time.Timer (Store.afterFunc).
type timer interface {
	Stop() bool
	Reset(time.Duration) bool
}

func (s *Store) newTimer(d time.Duration, f func()) timer {
	if s.afterFunc != nil {
		return s.afterFunc(d, f)
	}
	return time.AfterFunc(d, f)
}

// tooLarge reports whether an answer, or an ERROR event's Status, says the resourceVersion asked
// for is ahead of the server's.
func tooLarge(status []byte) bool {
	return bytes.Contains(status, []byte("ResourceVersionTooLarge")) || bytes.Contains(status, []byte("Too large resource version"))
}

// tooLargeErr reports whether err is an answer "Too large resource version".
func tooLargeErr(err error) bool {
	var se *listwatch.StatusError
	return errors.As(err, &se) && se.Code == http.StatusGatewayTimeout && tooLarge(se.Body)
}

// ahead marks the store stale, for why, and makes its next sync list the upstream's current
// state, whatever its resourceVersion.
func (s *Store) ahead(why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stale, s.reset, s.relist = why, true, true
}

// Stale returns why the store is known to be stale, "" when it is not.
func (s *Store) Stale() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.stale
}

// switchTo records the upstream of the next sync; a store that had read another lists again
// (not older than what it holds).
func (s *Store) switchTo(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.upstream != "" && s.upstream != name && s.synced {
		s.relist = true
	}
	s.upstream = name
}

// watchdog arms, for a watch of an upstream that has sent bookmarks before, a timer that cancels
// the watch with errNoBookmark after staleAfter without anything from the upstream; alive
// restarts it. stop ends it.
func (s *Store) watchdog(ctx context.Context) (wctx context.Context, alive func(), stop func()) {
	s.mu.RLock()
	on := s.bookmarks
	s.mu.RUnlock()
	if !on {
		return ctx, func() {}, func() {}
	}
	wctx, cancel := context.WithCancelCause(ctx)
	t := s.newTimer(staleAfter, func() { cancel(errNoBookmark) })
	return wctx, func() { t.Reset(staleAfter) }, func() { t.Stop(); cancel(nil) }
}

// sawBookmark records that the upstream sends bookmarks (a watch from it is then watched for
// silence).
func (s *Store) sawBookmark() {
	s.mu.Lock()
	s.bookmarks = true
	s.mu.Unlock()
}

// newTimelineLocked starts the store anew at a state listed at a lower resourceVersion than its
// own: the window goes (every watch gets 410), and watches from the old timeline's
// resourceVersions that the new one has not reached get 410 (lock held).
func (s *Store) newTimelineLocked(objs map[string]*object, size int64, listRV uint64) {
	s.abandoned = max(s.abandoned, s.rv)
	s.dropWindowLocked()
	s.objs, s.objBytes, s.rv, s.floor = objs, size, listRV, listRV
}

// dropWindowLocked empties the event window: every open watch's cursor falls behind it (lock
// held).
func (s *Store) dropWindowLocked() {
	for _, ev := range s.events {
		ev.obj.refs--
	}
	s.first += uint64(len(s.events)) + 1
	s.events, s.eventBytes, s.keptBytes, s.keptN = nil, 0, 0, 0
}

// errorEvent turns an ERROR event of the upstream's watch into the store's error: its 410
// Expired, or "too large" (the store is ahead).
func (s *Store) errorEvent(ev wire.WatchEvent) error {
	if tooLarge(ev.Object) {
		return errAhead
	}
	return errGone
}

// aheadOf turns a watch's end into errAhead when it says the store is ahead of its upstream:
// "too large", or no bookmark for staleAfter.
func (s *Store) aheadOf(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, errAhead) || tooLargeErr(err):
		s.ahead("the upstream's resourceVersion is behind the store's (Too large resource version)")
		return errAhead
	case err != nil && errors.Is(context.Cause(ctx), errNoBookmark):
		s.ahead("no bookmark from the upstream's watch for " + staleAfter.String() + ": taken for behind the store")
		return errAhead
	}
	return err
}

// resetting reports whether the next list reads the upstream's current state.
func (s *Store) resetting() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.reset
}

// Stale returns why a shared store is known to be stale ("" when none is), for readyz.
func (p *Pool) Stale() string {
	if p == nil {
		return ""
	}
	for r, st := range p.stores {
		if why := st.Stale(); why != "" {
			return "shared store of " + r.String() + " is stale: " + why
		}
	}
	return ""
}
