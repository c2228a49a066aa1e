package cache

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"nodehub/wire"
)

// Kinds of response a Stream carries.
const (
	StreamObject = iota // get, and the object a create/update/patch returns
	StreamList
	StreamWatch
	StreamDiscovery // a discovery answer, kept whole
)

// Stream is one response being teed into the cache. The client's goroutine calls Write and End;
// everything else happens on the resource's writer goroutine.
type Stream struct {
	w     *Writer
	r     Resource
	kind  int
	media wire.MediaType
	gzip  bool
	sel   wire.Selector
	page  bool // a part of the list (a page, a shard): its items are kept, its scope not reconciled, nor moved on by a bookmark
	// watchList is a watch with sendInitialEvents (a watch-list, client-go's list since 1.35):
	// its ADDED events up to the BOOKMARK annotated k8s.io/initial-events-end are a list, recorded
	// and reconciled at that bookmark as a LIST's answer is at its end.
	watchList bool
	broken    atomic.Bool
	// q is the queue the stream's last chunk went to: the next goes there too without a look-up
	// in the writer's map, unless the queue was retired meanwhile.
	q atomic.Pointer[queue]

	discoveryPath, discoveryType string

	// Writer-side state.
	// cur is the batch of the goroutine feeding the stream now: the splitters' callbacks write
	// into it, not into the batch of the goroutine that made them (an idle queue is retired, and
	// a watch's next event arrives at a new queue with a new batch).
	cur       *batch
	list      wire.ListSplitter
	watch     wire.WatchSplitter
	buf       []byte
	seen      map[string]bool
	listMeta  wire.ListMeta
	failed    bool
	unchanged bool // a re-list whose answer is what the cache already holds
	listed    bool // a watch-list's initial events have ended (or can no longer be a list)
}

// Write hands a copy of p to the resource's queue. It never blocks; when the queue budget is
// exhausted the stream is abandoned and the resource marked incomplete.
func (st *Stream) Write(p []byte) {
	if len(p) > 0 && !st.broken.Load() {
		st.keep(bytes.Clone(p))
	}
}

// keep hands p itself to the resource's queue: p is never changed after (a copy, or a body held
// whole).
func (st *Stream) keep(p []byte) {
	if len(p) == 0 || st.broken.Load() {
		return
	}
	if !st.w.enqueue(st.r, op{st: st, data: p}) {
		st.broken.Store(true)
		st.w.markDropped(st.r)
	}
}

// End says the response is over; ok is false when it ended early (an error, a cut connection).
func (st *Stream) End(ok bool) {
	st.w.enqueue(st.r, op{st: st, end: true, ok: ok && !st.broken.Load()})
}

// feed parses a chunk (writer goroutine).
func (st *Stream) feed(b *batch, data []byte) {
	if st.failed {
		return
	}
	if st.gzip || st.kind == StreamObject || st.kind == StreamDiscovery {
		if len(st.buf)+len(data) > wire.MaxObjectBytes && !st.gzip || len(st.buf)+len(data) > maxBody || st.gzip && int64(len(st.buf)+len(data)) > b.w.budget {
			st.failed = true // too large to keep: not cached, and a list stays incomplete
			st.buf = nil
			return
		}
		if st.buf == nil {
			st.buf = data[:len(data):len(data)] // the queue's bytes are the stream's: kept, not copied (an append copies)
		} else {
			st.buf = append(st.buf, data...)
		}
		return
	}
	st.parse(b, data)
}

func (st *Stream) parse(b *batch, data []byte) {
	st.cur = b
	var err error
	switch st.kind {
	case StreamList:
		if st.list == nil {
			st.seen = map[string]bool{}
			st.list = wire.NewListSplitter(st.media, wire.ListHandler{
				Meta: func(m wire.ListMeta) {
					st.listMeta = m
					// Same resourceVersion as the last complete answer to this list: nothing in
					// the cluster changed since, so neither did the objects on disk.
					rec, err := st.cur.w.store.List(st.r, st.sel.Namespace, st.sel.LabelSelector, st.sel.FieldSelector)
					st.unchanged = err == nil && rec.Complete && m.ResourceVersion != "" && rec.ResourceVersion == m.ResourceVersion && !st.page
				},
				Item: func(raw []byte) error { return st.cur.put(st, raw) },
				Skip: func() bool { return st.unchanged }, // put keeps nothing of an unchanged list
			})
		}
		_, err = st.list.Write(data)
	case StreamWatch:
		if st.watch == nil {
			if st.watchList && !st.listed {
				st.seen = map[string]bool{}
			}
			st.watch = wire.NewWatchSplitter(st.media, func(ev wire.WatchEvent) error { return st.cur.event(st, ev) })
		}
		_, err = st.watch.Write(data)
	}
	if err != nil {
		// A stream the cache cannot follow (an object over wire.MaxObjectBytes, a malformed one)
		// leaves what it would have changed unknown: the lists on disk are no longer complete.
		st.failed = true
		b.w.fail(st.r, fmt.Errorf("cache: parse %s: %w", st.r, err))
		b.w.fail(st.r, b.w.store.MarkIncomplete(st.r))
	}
}

// finish handles the end of the response (writer goroutine).
func (st *Stream) finish(b *batch, ok bool) {
	st.cur = b
	if st.gzip && ok && !st.failed {
		st.gunzip(b)
	}
	if !ok || st.failed {
		return
	}
	switch st.kind {
	case StreamDiscovery:
		form := wire.ParseMediaType(st.discoveryType).String()
		b.w.fail(st.r, b.w.store.PutDiscovery(st.discoveryPath, form, st.discoveryType, st.buf))
		st.buf = nil
	case StreamObject:
		if len(st.buf) > 0 {
			_ = b.put(st, bytes.TrimSpace(st.buf))
		}
		st.buf = nil
	case StreamList:
		if st.list == nil {
			return
		}
		if err := st.list.Close(); err != nil || st.page || st.listMeta.Continue != "" || st.unchanged {
			return
		}
		b.flush() // the items first, so the reconcile sees them
		b.w.fail(st.r, b.reconcile(st))
	}
}

// gunzip parses a compressed body kept whole (the apiserver compresses large get and list answers),
// a piece at a time so that memory holds the compressed body and one piece, not the whole list.
func (st *Stream) gunzip(b *batch) {
	zr, err := gzip.NewReader(bytes.NewReader(st.buf))
	if err == nil {
		if st.kind == StreamObject {
			var plain []byte
			// Bounded as an object is: past the bound it fails, never cut and kept.
			if plain, err = wire.ReadAllLimit(zr, wire.MaxObjectBytes, "decompressed object"); err == nil {
				st.buf = plain
			}
		} else {
			piece := make([]byte, 32<<10)
			for err == nil && !st.failed {
				var n int
				n, err = zr.Read(piece)
				if n > 0 {
					st.parse(b, piece[:n])
					if b.pendingBytes > maxPendingBytes {
						b.flush()
					}
				}
			}
			if err == io.EOF {
				err = nil
			}
			st.buf = nil
		}
	}
	if err != nil {
		st.failed = true
		b.w.fail(st.r, fmt.Errorf("cache: gunzip %s: %w", st.r, err))
	}
}

// batch is a queue's pending writes, coalesced by object.
type batch struct {
	w            *Writer
	r            Resource
	pending      map[string]*pend
	order        []string
	pendingBytes int
	due          time.Time // when the oldest pending change must be written
	// bookmarks are the newest BOOKMARK resourceVersions seen per list scope, recorded at flush.
	bookmarks map[listScope]string
	// full is set while new objects of this resource are skipped for --cache-max-bytes.
	full bool
}

// listScope names one list: namespace, label selector, field selector.
type listScope struct{ ns, ls, fs string }

type pend struct {
	key    Key
	h      Header
	body   []byte
	del    bool
	scoped *wire.Selector // for a delete seen through a selective watch: keep if another list holds it
}

func newBatch(w *Writer, r Resource) *batch {
	return &batch{w: w, r: r, pending: map[string]*pend{}}
}

func (b *batch) apply(o op) {
	if o.data != nil {
		if !o.st.broken.Load() {
			o.st.feed(b, o.data)
		}
		return
	}
	if o.end {
		o.st.finish(b, o.ok)
	}
}

func (b *batch) add(p *pend) {
	id := p.key.ID()
	if old, ok := b.pending[id]; ok {
		b.pendingBytes -= len(old.body)
	} else {
		b.order = append(b.order, id)
	}
	if b.due.IsZero() {
		b.due = time.Now().Add(b.w.Delay)
	}
	b.pending[id] = p
	b.pendingBytes += len(p.body)
}

func (b *batch) put(st *Stream, raw []byte) error {
	if st.unchanged {
		return nil
	}
	if !wire.WholeObject(raw) {
		// Torn or malformed: never kept, and the stream it came in is not followed further.
		return fmt.Errorf("cache: %s: a malformed object (%d bytes)", b.r, len(raw))
	}
	m, err := wire.ExtractMeta(raw, b.r.Resource)
	if err != nil {
		b.w.fail(b.r, err)
		return nil // one bad object does not spoil the stream
	}
	k := Key{Resource: b.r, Namespace: m.Namespace, Name: m.Name}
	if err := k.validate(); err != nil {
		b.w.fail(b.r, err)
		return nil
	}
	if st.seen != nil {
		st.seen[k.ID()] = true
	}
	ct := wire.MediaJSON
	if st.media.IsProtobuf() && wire.IsProtobuf(raw) {
		ct = wire.MediaProtobuf
	}
	b.add(&pend{key: k, h: headerFor(m, ct), body: raw})
	return nil
}

func (b *batch) event(st *Stream, ev wire.WatchEvent) error {
	switch ev.Type {
	case wire.EventAdded, wire.EventModified:
		return b.put(st, ev.Object)
	case wire.EventBookmark:
		if st.watchList && !st.listed {
			if wire.EndsInitialEvents(ev.Object) {
				return b.endInitial(st, ev.Object)
			}
			return nil // mid-list: the recorded list moves on when this one is whole, not before
		}
		if st.page {
			return nil // a shard's bookmark says nothing of the other shards' objects
		}
		if m, err := wire.ExtractMeta(ev.Object, b.r.Resource); err == nil && m.ResourceVersion != "" {
			if b.bookmarks == nil {
				b.bookmarks = map[listScope]string{}
			}
			key := listScope{st.sel.Namespace, st.sel.LabelSelector, st.sel.FieldSelector}
			if newerRV(m.ResourceVersion, b.bookmarks[key]) {
				b.bookmarks[key] = m.ResourceVersion
			}
			if b.due.IsZero() {
				b.due = time.Now().Add(b.w.Delay)
			}
		}
	case wire.EventDeleted:
		m, err := wire.ExtractMeta(ev.Object, b.r.Resource)
		if err != nil {
			b.w.fail(b.r, err)
			return nil
		}
		p := &pend{key: Key{Resource: b.r, Namespace: m.Namespace, Name: m.Name}, del: true, h: headerFor(m, "")}
		if st.seen != nil {
			delete(st.seen, p.key.ID())
		}
		if !st.sel.Everything() {
			sel := st.sel
			p.scoped = &sel
		}
		if p.key.validate() == nil {
			b.add(p)
		}
	}
	return nil
}

// endInitial records a watch-list's initial events as the list of its scope, at the
// resourceVersion of the bookmark that ends them (which names the items' type too, so an empty
// list is answered): exactly what a LIST with the same selectors records at its end, its objects
// written first, then the scope reconciled (what the list no longer holds leaves). The events
// after it keep the list current as a watch after a LIST does. A watch-list cut before this
// bookmark records nothing, and the list recorded before stays as it was.
func (b *batch) endInitial(st *Stream, obj []byte) error {
	st.listed = true
	m, err := wire.ExtractMeta(obj, b.r.Resource)
	if err != nil || m.ResourceVersion == "" {
		st.seen = nil
		b.w.fail(b.r, fmt.Errorf("cache: %s: the initial-events-end bookmark has no resourceVersion: %v", b.r, err))
		return nil
	}
	st.listMeta = wire.ListMeta{APIVersion: m.APIVersion, Kind: m.Kind + "List", ResourceVersion: m.ResourceVersion}
	b.flush() // the items first, so the reconcile sees them
	if rec, err := b.w.store.List(b.r, st.sel.Namespace, st.sel.LabelSelector, st.sel.FieldSelector); err == nil && rec.Complete && !b.full &&
		rec.ResourceVersion == m.ResourceVersion && sameKeys(rec.Keys, st.seen) {
		st.seen = nil
		return nil // the list as recorded: nothing to write (a LIST's answer skips it as "unchanged")
	}
	b.w.fail(b.r, b.reconcile(st))
	return nil
}

// sameKeys reports whether a recorded list's keys are the set seen.
func sameKeys(keys []string, seen map[string]bool) bool {
	if len(keys) != len(seen) {
		return false
	}
	for _, k := range keys {
		if !seen[k] {
			return false
		}
	}
	return true
}

// flush writes the pending objects: an object whose resourceVersion is not newer than the stored
// one is not written again, unless the stored one is a local (offline) change.
func (b *batch) flush() {
	full := false
	defer func() {
		if full {
			b.full = true
			b.w.fail(b.r, b.w.store.MarkIncomplete(b.r))
		}
	}()
	if b.w.MaxBytes > 0 && b.w.store.Size() < b.w.MaxBytes {
		b.full = false
	}
	var lists []ListRecord
	listsRead := false
	for _, id := range b.order {
		p := b.pending[id]
		if p.del {
			if p.scoped != nil {
				if !listsRead {
					lists, _ = b.w.store.Lists(b.r)
					listsRead = true
				}
				if heldByOthers(lists, *p.scoped)[p.key.ID()] {
					continue
				}
			}
			b.w.fail(b.r, b.w.store.Delete(p.key))
			continue
		}
		oldRV, oldLocal, cached := b.w.store.head(p.key)
		if cached && !oldLocal && !newerRV(p.h.ResourceVersion, oldRV) {
			continue // unchanged (or older): no write
		}
		if !cached && b.w.MaxBytes > 0 && b.w.store.Size() >= b.w.MaxBytes {
			full = true // a new object past --cache-max-bytes: not cached
			if b.w.OnFull != nil {
				b.w.OnFull(b.r)
			}
			continue
		}
		b.w.fail(b.r, b.w.store.Put(p.key, &p.h, p.body))
	}
	b.recordBookmarks()
	if len(b.order) > 256 { // after a large list, let the big map and slice go
		b.pending, b.order = map[string]*pend{}, nil
	} else {
		clear(b.pending)
		b.order = b.order[:0]
	}
	b.pendingBytes = 0
	b.due = time.Time{}
}

// recordBookmarks moves the resourceVersion of each recorded list forward to the newest bookmark
// its watch sent (a list never recorded is not created by a bookmark).
func (b *batch) recordBookmarks() {
	for sc, rv := range b.bookmarks {
		rec, err := b.w.store.List(b.r, sc.ns, sc.ls, sc.fs)
		if err == nil && newerRV(rv, rec.ResourceVersion) {
			b.w.fail(b.r, b.w.store.setListMeta(b.r, sc, rv, rec.Complete))
		}
	}
	b.bookmarks = nil
}

// heldByOthers is the set of keys the last answers of every list but sel hold.
func heldByOthers(lists []ListRecord, sel wire.Selector) map[string]bool {
	held := map[string]bool{}
	for _, rec := range lists {
		if rec.Namespace == sel.Namespace && rec.LabelSelector == sel.LabelSelector && rec.FieldSelector == sel.FieldSelector {
			continue
		}
		for _, k := range rec.Keys {
			held[k] = true
		}
	}
	return held
}

// reconcile makes the stored objects in a complete list's scope equal to what the list returned:
// objects it no longer returns are deleted unless another list still selects them or they are
// newer than the list (a list answered from a lagging watch cache, rv=0, must not delete what a
// watch already brought). Then the list is recorded.
func (b *batch) reconcile(st *Stream) error {
	lists, err := b.w.store.Lists(b.r)
	if err != nil {
		return err
	}
	held := heldByOthers(lists, st.sel)
	var stale []Key
	err = b.w.store.Keys(b.r, st.sel.Namespace, func(k Key) error {
		if st.seen[k.ID()] || held[k.ID()] {
			return nil
		}
		h, err := b.w.store.Header(k)
		if err != nil {
			return nil
		}
		if newerRV(h.ResourceVersion, st.listMeta.ResourceVersion) && isRV(h.ResourceVersion) && isRV(st.listMeta.ResourceVersion) {
			return nil // changed after the list's snapshot (a stale rv=0 answer): not the list's to delete
		}
		body := func() []byte { _, body, _ := b.w.store.Get(k); return body }
		if st.sel.MatchesMeta(h.Meta(), body) {
			stale = append(stale, k)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, k := range stale {
		if err := b.w.store.Delete(k); err != nil {
			return err
		}
	}
	keys := slices.Sorted(maps.Keys(st.seen))
	st.seen = nil
	// An item whose write failed (ENOSPC inside the re-list) is not held: the list is not whole.
	complete := !b.full && b.w.store.holdsAll(b.r, keys)
	return b.w.store.PutList(b.r, ListRecord{Namespace: st.sel.Namespace, LabelSelector: st.sel.LabelSelector,
		FieldSelector: st.sel.FieldSelector, ResourceVersion: st.listMeta.ResourceVersion, Complete: complete, At: time.Now().UTC(), Keys: keys,
		APIVersion: st.listMeta.APIVersion, Kind: st.listMeta.ItemKind()})
}
