package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"nodehub/listwatch"
	"nodehub/wire"
)

// Upstream is where a store's list and watch come from: the cloud, or the pool's leader.
type Upstream struct {
	// Name is "cloud" or the leader's address.
	Name string
	// Fetch sends one GET (path with its query) to the upstream, accepting protobuf then JSON.
	Fetch listwatch.Fetch
	// Silence, when set, ends a watch that received nothing for that long (a leader sends a
	// BOOKMARK every second, so silence means it is dead or cut off).
	Silence time.Duration
	// Failed, if set, is told when the upstream could not be reached, answered an error, or went
	// silent.
	Failed func(error)
}

// watchListOff remembers, per upstream name, that it refused a streaming watch-list (an apiserver
// without the WatchList feature, or before v1.27): that upstream is listed instead.
type watchListOff struct {
	mu  sync.Mutex
	off map[string]bool
}

func (w *watchListOff) is(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.off[name]
}

func (w *watchListOff) set(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.off == nil {
		w.off = map[string]bool{}
	}
	w.off[name] = true
}

// Picker returns the upstream to use now and a channel closed when that choice changes.
type Picker func() (Upstream, <-chan struct{})

// errGone is an upstream's 410: the store re-lists (not the upstream's fault).
var errGone = errors.New("pool: upstream expired the resourceVersion")

// run keeps the store in sync: list when needed, then watch from the store's resourceVersion,
// over and over, from whatever upstream pick says, until ctx ends (listwatch's loop). wake, if
// set, ends the loop's back-off when the cloud comes back (listwatch.Loop.Wake).
func (s *Store) run(ctx context.Context, pick Picker, wake func() <-chan struct{}, log *slog.Logger) {
	failures := 0
	loop := listwatch.Loop{First: 250 * time.Millisecond, Most: 30 * time.Second, Refused: s.Refused, Wake: wake}
	loop.Run(ctx, func(ctx context.Context) (<-chan struct{}, error) {
		up, changed := pick()
		uctx, cancel := context.WithCancel(ctx)
		ended := make(chan struct{})
		go func() {
			select {
			case <-changed:
				cancel()
			case <-ended:
			}
		}()
		err := s.sync(uctx, up)
		switched := uctx.Err() != nil && ctx.Err() == nil
		close(ended)
		cancel()
		if ctx.Err() != nil || err == nil || switched || errors.Is(err, errGone) || errors.Is(err, errListInstead) || errors.Is(err, errAhead) {
			failures = 0
			return changed, nil
		}
		if up.Failed != nil {
			up.Failed(err)
		}
		log.Debug("pool: upstream failed", "resource", s.res.String(), "upstream", up.Name, "err", err)
		if errors.Is(err, errTooLarge) && failures == 0 {
			log.Warn("pool: a shared store went past its bounds; its clients read the cloud", "resource", s.res.String(), "upstream", up.Name, "err", err)
		}
		if failures++; failures == 5 && !s.Synced() {
			log.Warn("pool: cannot list the resource; its clients go to the cloud until it can (RBAC?)", "resource", s.res.String(), "upstream", up.Name, "err", err)
		}
		return changed, err
	})
}

// sync lists when the store needs it, then watches until the watch ends. The list is a
// streaming watch-list (the initial state as ADDED events up to a bookmark, then the watch goes
// on in the same request: one request instead of two, and no list held whole in the apiserver's
// memory) where the upstream serves it, else a LIST. Neither asks etcd: a first list reads the
// apiserver's watch cache (resourceVersion 0, as client-go's reflector does), a list after the
// store's resourceVersion expired reads it "not older than" what the store holds, so it never
// goes back in time; the store turns the new state into events (replace), and its clients'
// watches carry on.
func (s *Store) sync(ctx context.Context, up Upstream) error {
	s.switchTo(up.Name)
	if s.needsList() {
		if !s.noWatchList.is(up.Name) {
			return s.watch(ctx, up, true)
		}
		if err := s.list(ctx, up); err != nil {
			return err
		}
	}
	return s.watch(ctx, up, false)
}

// listQuery is the query of the store's next list: from the watch cache, never older than the
// store; the upstream's current state when the store is ahead of it.
func (s *Store) listQuery() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.reset {
		return ""
	}
	if !s.synced || s.rv == 0 {
		return "resourceVersion=0"
	}
	return "resourceVersion=" + strconv.FormatUint(s.rv, 10) + "&resourceVersionMatch=NotOlderThan"
}

func (s *Store) list(ctx context.Context, up Upstream) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var items []*object
	var itemErr error
	var size int64
	meta, err := listwatch.List(ctx, up.Fetch, s.res.url(s.listQuery()), func(raw []byte) error {
		o, err := newObject(raw, s.res)
		if err != nil {
			itemErr = err
			return nil
		}
		items, size = append(items, o), size+int64(len(o.raw))
		if s.over(len(items), size) {
			return errTooLarge // what was read goes: memory holds at most the bounds
		}
		return nil
	})
	if tooLargeErr(err) {
		s.ahead("the upstream's resourceVersion is behind the store's (it answered a list: Too large resource version)")
		return errAhead
	}
	if errors.Is(err, errTooLarge) {
		s.overflow()
		maxN, maxB := s.bounds()
		return fmt.Errorf("pool: list %s: more than %d objects or %d bytes; its clients read the cloud: %w", s.res, maxN, maxB, errTooLarge)
	}
	if err == nil {
		err = itemErr
	}
	if err != nil {
		return fmt.Errorf("pool: list %s: %w", s.res, err)
	}
	s.replace(items, parseRV(meta.ResourceVersion), meta.APIVersion, meta.ItemKind())
	return nil
}

// watch watches from the store's resourceVersion until the watch ends; with initial, it is a
// watch-list: the upstream first sends the whole state as ADDED events, ended by a bookmark
// annotated k8s.io/initial-events-end, which replaces the store's contents.
func (s *Store) watch(ctx context.Context, up Upstream, initial bool) error {
	path := s.res.url(s.watchQuery(initial))
	run := &watchRun{initial: initial}
	if initial {
		// An upstream that ignores sendInitialEvents (an apiserver before v1.27) answers a plain
		// watch, which from a resourceVersion with nothing new says nothing at all: a watch-list
		// that says nothing for initialSilence is taken for one.
		wctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		run.quiet = time.AfterFunc(initialSilence, func() { cancel(errNoWatchList) })
		defer run.quiet.Stop()
		ctx = wctx
	}
	ctx, alive, stop := s.watchdog(ctx)
	defer stop()
	err := listwatch.Watch(ctx, up.Fetch, path, up.Silence, func(ev wire.WatchEvent) error {
		if run.quiet != nil {
			run.quiet.Stop()
		}
		alive()
		return s.watchEvent(run, ev)
	})
	return s.watchEnded(ctx, up, run.initial, err)
}

// watchRun is the state of one watch: whether it is still in a watch-list's initial events, and
// the objects these sent so far.
type watchRun struct {
	initial bool
	items   []*object
	size    int64
	quiet   *time.Timer // stopped by the first event of a watch-list
}

// watchQuery returns the query of a watch from the store's resourceVersion (with initial, of a
// watch-list, from it if the store holds a list).
func (s *Store) watchQuery(initial bool) string {
	timeout := 300 + rand.IntN(300) // as client-go spreads its watches: 5–10 minutes
	q := "watch=1&allowWatchBookmarks=true&timeoutSeconds=" + strconv.Itoa(timeout)
	if !initial {
		return q + "&resourceVersion=" + strconv.FormatUint(s.ResourceVersion(), 10)
	}
	rv := ""
	if s.Synced() && !s.resetting() {
		rv = strconv.FormatUint(s.ResourceVersion(), 10)
	}
	return q + "&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=" + rv
}

// watchEvent applies one event of a watch: to the store, or (in a watch-list's initial events)
// to the objects that will replace its contents.
func (s *Store) watchEvent(run *watchRun, ev wire.WatchEvent) error {
	switch ev.Type {
	case wire.EventError:
		return s.errorEvent(ev) // the apiserver's 410 Expired, or "too large"
	case wire.EventBookmark:
		return s.watchBookmark(run, ev)
	}
	o, err := newObject(ev.Object, s.res)
	if err != nil {
		return err
	}
	if run.initial {
		run.items, run.size = append(run.items, o), run.size+int64(len(o.raw))
		if s.over(len(run.items), run.size) {
			s.overflow()
			return errTooLarge // what was read goes: memory holds at most the bounds
		}
		return nil
	}
	s.apply(ev.Type, o)
	if !s.Synced() {
		return errTooLarge // it went past its bounds: list again (and again, with the back-off)
	}
	return nil
}

// watchBookmark moves the store's resourceVersion on, or ends a watch-list's initial events by
// replacing the store's contents with them.
func (s *Store) watchBookmark(run *watchRun, ev wire.WatchEvent) error {
	m, err := wire.ExtractMeta(ev.Object, s.res.Resource)
	if err != nil {
		return nil
	}
	if run.initial {
		if !wire.EndsInitialEvents(ev.Object) {
			return errNoWatchList // a server that ignored sendInitialEvents
		}
		s.replace(run.items, parseRV(m.ResourceVersion), m.APIVersion, m.Kind)
		run.items, run.initial = nil, false
		return nil
	}
	s.sawBookmark()
	s.bookmark(parseRV(m.ResourceVersion))
	return nil
}

// watchEnded returns what the end of a watch means: nil for its timeout (watch again from where
// the store is), errAhead, errGone, errListInstead, errTooLarge, or the upstream's failure.
func (s *Store) watchEnded(ctx context.Context, up Upstream, initial bool, err error) error {
	if errors.Is(err, errTooLarge) {
		maxN, maxB := s.bounds()
		return fmt.Errorf("pool: watch %s: past %d objects or %d bytes; its clients read the cloud: %w", s.res, maxN, maxB, errTooLarge)
	}
	if initial && ctx.Err() != nil && errors.Is(context.Cause(ctx), errNoWatchList) {
		err = errNoWatchList
	}
	if err = s.aheadOf(ctx, err); errors.Is(err, errAhead) {
		return err
	}
	gone := errors.Is(err, errGone) || listwatch.IsGone(err)
	if gone && !initial {
		s.expire()
		return errGone
	}
	// A watch-list "not older than" never expires: a 410 means the upstream took it for a plain
	// watch.
	if initial && (gone || errors.Is(err, errNoWatchList) || refusedWatchList(err)) {
		s.noWatchList.set(up.Name)
		return fmt.Errorf("pool: %s does not serve watch-lists of %s (%v): %w", up.Name, s.res, err, errListInstead)
	}
	if err != nil {
		return fmt.Errorf("pool: watch %s from %s: %w", s.res, up.Name, err)
	}
	return nil // the watch's timeout: watch again from where the store is
}

// initialSilence is how long a watch-list may say nothing before the upstream is taken for one
// that ignores sendInitialEvents (a real one sends the first event, or the bookmark of an empty
// collection, at once).
const initialSilence = 10 * time.Second

// errListInstead: the upstream does not serve watch-lists, the store lists at once (not the
// upstream's fault).
var errListInstead = errors.New("listing instead")

// errNoWatchList: the upstream answered a watch-list with a plain watch.
var errNoWatchList = errors.New("pool: the upstream ignored sendInitialEvents")

// refusedWatchList reports whether an upstream refused a watch-list as a request it does not
// serve (400, 422, 501), rather than failing or throttling it.
func refusedWatchList(err error) bool {
	var se *listwatch.StatusError
	if !errors.As(err, &se) {
		return false
	}
	return se.Code == http.StatusBadRequest || se.Code == http.StatusUnprocessableEntity || se.Code == http.StatusNotImplemented
}
