package pool

import (
	"errors"
	"sort"
	"sync"
	"time"

	"nodehub/wire"
)

// Store is the shared copy of one pool-scope resource: every object as its upstream sent it (raw
// bytes, protobuf when the upstream speaks it) with the metadata selectors need, and a bounded
// window of recent events so a watch can resume from a resourceVersion. Watches do not get a
// goroutine or a buffer each: they read the window from their own cursor and wait on a channel
// that is closed at every change. Safe for concurrent use.
type Store struct {
	res Resource
	// MaxEvents and MaxEventBytes bound the event window (defaults 500 and 2 MiB: under a steady
	// 10 changes/s, almost a minute), beyond what an open watch has not read yet (readers.go). A
	// watch that asks to start before it gets 410 Expired and re-lists (from this store: no cloud
	// traffic).
	MaxEvents     int
	MaxEventBytes int64
	// Refused, if set, is the back-off of its loop after a 403 or 404 (listwatch.Loop.Refused).
	Refused time.Duration
	// MaxObjects and MaxBytes bound what the store holds (defaults DefaultMaxObjects and
	// DefaultMaxBytes of raw objects): a leader (or a cloud) that sends more cannot take the
	// node's memory. Past either the store empties and is not served, so the node's clients read
	// the cloud; it lists again (with listwatch's back-off) and serves again once the resource fits.
	MaxObjects int
	MaxBytes   int64

	mu         sync.RWMutex
	objs       map[string]*object // by namespace/name
	rv         uint64             // the store's resourceVersion
	synced     bool               // a list has been applied
	listed     chan struct{}      // closed when the first list is applied
	relist     bool               // the upstream said the store's resourceVersion is too old
	events     []event            // ascending resourceVersions
	first      uint64             // sequence number of events[0]
	floor      uint64             // a watch from below it has lost events
	objBytes   int64
	eventBytes int64
	// kept counts the objects the window alone keeps alive (an older copy of an object, a deleted
	// one): they count against MaxObjects and MaxBytes with the objects (window.go).
	keptBytes  int64
	keptN      int
	wake       chan struct{}        // closed at each change
	readers    map[*reader]struct{} // the open watches' places in the window (readers.go)
	apiVersion string
	kind       string

	noWatchList watchListOff // upstreams that refused a watch-list

	// Ahead of the upstream (stale.go).
	reset     bool                              // the next list reads the upstream's current state, whatever its resourceVersion
	stale     string                            // why the store is known stale ("" not)
	abandoned uint64                            // the highest resourceVersion of a timeline the store left
	upstream  string                            // the upstream the store last read
	bookmarks bool                              // the upstream sends bookmarks
	afterFunc func(time.Duration, func()) timer // the watchdog's clock (nil: time.AfterFunc)
}

type event struct {
	typ  string
	obj  *object
	prev *object // what selectors read of the object before a MODIFIED event (it may enter or leave a selection); no bytes
	rv   uint64
}

// The bounds of a store (Store.MaxObjects, Store.MaxBytes): 50,000 objects is five times the
// Services of a large cluster, 64 MiB of raw objects four times their JSON.
const (
	DefaultMaxObjects = 50000
	DefaultMaxBytes   = 64 << 20
)

// errTooLarge is a list or watch that takes a store past its bounds.
var errTooLarge = errors.New("pool: past the store's bounds")

func (s *Store) bounds() (int, int64) {
	n, b := s.MaxObjects, s.MaxBytes
	if n <= 0 {
		n = DefaultMaxObjects
	}
	if b <= 0 {
		b = DefaultMaxBytes
	}
	return n, b
}

// over reports whether n objects of b bytes are past the store's bounds.
func (s *Store) over(n int, b int64) bool {
	maxN, maxB := s.bounds()
	return n > maxN || b > maxB
}

// overflowLocked empties the store and stops serving it: its clients read the cloud, its open
// watches end with 410 (their cursors are behind the window) and their clients re-list, from
// the cloud. The next sync lists again (lock held).
func (s *Store) overflowLocked() {
	s.objs, s.objBytes = map[string]*object{}, 0
	s.dropWindowLocked()
	s.synced, s.relist = false, true
	s.notify()
}

// ErrExpired is returned for a watch that starts before the event window.
var ErrExpired = errors.New("pool: resourceVersion too old")

// errNotSynced is returned while no list has been applied.
var errNotSynced = errors.New("pool: store not synced yet")

// NewStore returns an empty store of res.
func NewStore(res Resource) *Store {
	return &Store{res: res, objs: map[string]*object{}, wake: make(chan struct{}), listed: make(chan struct{})}
}

// Synced reports whether the store holds a list to serve.
func (s *Store) Synced() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.synced
}

// FirstSynced returns a channel closed once the store holds its first list.
func (s *Store) FirstSynced() <-chan struct{} { return s.listed }

// ResourceVersion is the store's resourceVersion (0 before the first list).
func (s *Store) ResourceVersion() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rv
}

// Size returns the raw bytes of the objects and of the event window (events of objects that
// changed since hold their older copy; the latest ones share the object's bytes).
func (s *Store) Size() (objects, window int64, n int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.objBytes, s.eventBytes, len(s.objs)
}

// replace applies a list. The first one fills the store; later ones (after the upstream expired
// the store's resourceVersion, or a switch of upstream) become the events that turn the old
// contents into the new, so open watches carry on.
func (s *Store) replace(items []*object, listRV uint64, apiVersion, kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if apiVersion != "" {
		s.apiVersion, s.kind = apiVersion, kind
	}
	newm, size := s.listedLocked(items)
	if !s.synced {
		s.fillLocked(newm, size, listRV)
		s.notify()
		return
	}
	if s.reset {
		s.reset, s.stale = false, ""
		if listRV < s.rv {
			s.newTimelineLocked(newm, size, listRV)
			s.relist = false
			s.notify()
			return
		}
	}
	s.turnIntoLocked(newm, size, listRV)
	s.notify()
}

// listedLocked returns a list's objects by key and their raw bytes, keeping the store's copy of
// an object the list holds unchanged or older.
func (s *Store) listedLocked(items []*object) (map[string]*object, int64) {
	newm := make(map[string]*object, len(items))
	var size int64
	for _, o := range items {
		k := o.key()
		if old := s.objs[k]; s.synced && old != nil && old.rv >= o.rv {
			// Unchanged: the window's events may hold it, keep one copy. Older (a list from an
			// upstream behind the one before: a follower back from the cloud to its leader): the
			// store's copy is the newer one, and a client must never see an object go back.
			o = old
		}
		newm[k] = o
		size += int64(len(o.raw))
	}
	return newm, size
}

// fillLocked fills a store that holds no list with the first one.
func (s *Store) fillLocked(newm map[string]*object, size int64, listRV uint64) {
	s.objs, s.objBytes, s.rv, s.floor, s.synced, s.relist = newm, size, listRV, listRV, true, false
	s.reset, s.stale = false, ""
	select {
	case <-s.listed: // listed before, then emptied past its bounds (overflowLocked)
	default:
		close(s.listed)
	}
}

// turnIntoLocked replaces the store's contents with a list's, pushing the events between them
// into the window.
func (s *Store) turnIntoLocked(newm map[string]*object, size int64, listRV uint64) {
	evs := s.diffLocked(newm, listRV)
	prev := s.objs
	s.objs, s.objBytes, s.relist = newm, size, false
	for k, old := range prev {
		if newm[k] != old {
			s.retire(old)
		}
	}
	for _, ev := range evs {
		s.push(ev, len(evs)) // the whole difference stays in the window: its watches carry on
	}
	if listRV > s.rv {
		s.rv = listRV
	}
}

// diffLocked returns the events that turn the store's contents into newm: the additions and
// changes in resourceVersion order, then the deletions at the list's resourceVersion.
func (s *Store) diffLocked(newm map[string]*object, listRV uint64) []event {
	var evs []event
	for k, o := range newm {
		old := s.objs[k]
		switch {
		case old == nil:
			evs = append(evs, event{typ: wire.EventAdded, obj: o, rv: o.rv})
		case old.rv != o.rv:
			evs = append(evs, event{typ: wire.EventModified, obj: o, prev: old.selectable(), rv: o.rv})
		}
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].rv < evs[j].rv })
	for k, old := range s.objs {
		if newm[k] == nil {
			evs = append(evs, event{typ: wire.EventDeleted, obj: old, rv: listRV})
		}
	}
	return evs
}

// apply applies one watch event from the upstream; one that takes the store past its bounds
// empties it (overflowLocked).
func (s *Store) apply(typ string, o *object) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := o.key()
	old := s.objs[k]
	if old != nil && typ != wire.EventDeleted && o.rv <= old.rv {
		return // a copy the store already holds, or an older one (an upstream behind the last)
	}
	if (typ == wire.EventAdded || typ == wire.EventModified) && old == nil && s.over(len(s.objs)+1, s.objBytes+int64(len(o.raw))) ||
		old != nil && s.over(len(s.objs), s.objBytes-int64(len(old.raw))+int64(len(o.raw))) {
		s.overflowLocked()
		return
	}
	if old != nil {
		s.objBytes -= int64(len(old.raw))
	}
	switch typ {
	case wire.EventAdded, wire.EventModified:
		s.objs[k] = o
		s.objBytes += int64(len(o.raw))
	case wire.EventDeleted:
		delete(s.objs, k)
	default:
		return
	}
	if old != nil {
		s.retire(old)
	}
	ev := event{typ: typ, obj: o, rv: o.rv}
	if typ == wire.EventModified {
		ev.prev = old.selectable()
	}
	s.push(ev, 0)
	if o.rv > s.rv {
		s.rv = o.rv
	}
	s.notify()
}

// overflow empties the store and stops serving it (overflowLocked).
func (s *Store) overflow() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.overflowLocked()
}

// bookmark moves the store's resourceVersion forward without a change.
func (s *Store) bookmark(rv uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rv > s.rv {
		s.rv = rv
	}
}

// expire marks the store's resourceVersion as too old for its upstream: the next sync re-lists.
func (s *Store) expire() {
	s.mu.Lock()
	s.relist = true
	s.mu.Unlock()
}

func (s *Store) needsList() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return !s.synced || s.relist
}

// push appends an event to the window and drops the oldest beyond its bounds (windowOver) (lock
// held).
func (s *Store) push(ev event, keep int) {
	if n := len(s.events); n > 0 && ev.rv < s.events[n-1].rv {
		ev.rv = s.events[n-1].rv // keep the window ordered whatever an upstream does
	}
	s.events = append(s.events, ev)
	s.eventBytes += int64(len(ev.obj.raw))
	s.hold(ev.obj)
	for len(s.events) > 0 && s.windowOver(keep) {
		s.floor = s.events[0].rv
		s.eventBytes -= int64(len(s.events[0].obj.raw))
		s.release(s.events[0].obj)
		s.events[0] = event{}
		s.events = s.events[1:]
		s.first++
	}
}

func (s *Store) notify() {
	close(s.wake)
	s.wake = make(chan struct{})
}

// snapshot returns the objects in namespace/name order and the store's resourceVersion, and the
// cursor of the next event.
func (s *Store) snapshot() ([]*object, uint64, uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if !s.synced {
		return nil, 0, 0, errNotSynced
	}
	out := make([]*object, 0, len(s.objs))
	for _, o := range s.objs {
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.namespace != b.namespace {
			return a.namespace < b.namespace
		}
		return a.name < b.name
	})
	return out, s.rv, s.first + uint64(len(s.events)), nil
}

// cursorAfter returns the cursor of the first event newer than rv, or ErrExpired.
func (s *Store) cursorAfter(rv uint64) (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if !s.synced {
		return 0, errNotSynced
	}
	if rv < s.floor || rv > s.rv && rv <= s.abandoned {
		return 0, ErrExpired // lost events, or from a timeline the store left
	}
	i := sort.Search(len(s.events), func(i int) bool { return s.events[i].rv > rv })
	return s.first + uint64(i), nil
}

// next returns the events from cursor on, the cursor after them, and the channel closed at the
// next change. ErrExpired when the window has moved past cursor.
func (s *Store) next(cursor uint64) ([]event, uint64, <-chan struct{}, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.nextLocked(cursor)
}

// read is next for an open watch: it moves the watch's place in the window (readers.go) and
// returns the store's resourceVersion as of the events read, which a bookmark may carry.
func (s *Store) read(r *reader, cursor uint64) ([]event, uint64, uint64, <-chan struct{}, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	evs, next, wake, err := s.nextLocked(cursor)
	if err == nil {
		r.cursor.Store(next)
	}
	return evs, next, s.rv, wake, err
}

// nextLocked is next (lock held).
func (s *Store) nextLocked(cursor uint64) ([]event, uint64, <-chan struct{}, error) {
	if cursor < s.first {
		return nil, cursor, nil, ErrExpired
	}
	end := s.first + uint64(len(s.events))
	if cursor >= end {
		return nil, end, s.wake, nil
	}
	evs := append([]event(nil), s.events[cursor-s.first:]...)
	return evs, end, s.wake, nil
}

// itemType is the apiVersion and kind of the store's objects.
func (s *Store) itemType() (string, string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.apiVersion, s.kind
}
