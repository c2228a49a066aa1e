package pool

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/wire"
)

// Transform rewrites one object for one client (the hub's filters); drop removes it (from a
// list; in a watch it becomes a DELETED event). nil leaves every object as stored.
type Transform func(raw []byte) (out []byte, drop bool)

// Serving says how one list or watch is answered from a store.
type Serving struct {
	Info      *wire.RequestInfo
	Transform Transform
	// BookmarkEvery is how often a watch that allows bookmarks gets one (default 10 s; the leader
	// sends followers one every second, or three per LeaderTimeout if that is shorter, which is
	// how they notice it is gone).
	BookmarkEvery time.Duration
	// Alive, if set, is asked at every bookmark: false ends the watch (a leader cut off from the
	// cloud must not reassure its followers with bookmarks over stale data).
	Alive func() bool
	// Revisions, if set, change what the client is served apart from the store (the hub's
	// corrections of its node's endpoints): a watch sends what they change as MODIFIED.
	// Transform already applies the revision of the moment; a watch learns from Pass what
	// changed since it last looked.
	Revisions Revisions
	// WriteTimeout bounds each of a watch's writes (default 30 s): a client that stops reading
	// is cut off, and its watch holds the event window no longer (readers.go).
	WriteTimeout time.Duration
}

// watchWriteTimeout is Serving.WriteTimeout's default.
const watchWriteTimeout = 30 * time.Second

// Revisions are changes to what a request is served that come neither from the store nor from
// the cache: the hub's corrections of this node's endpoints (hub/endpointfix), which follow
// kubelet's reports while the cloud cannot. The shared stores' watches and the offline proxy's
// (hub/local) read them.
type Revisions interface {
	// Served returns the revision of the moment for the objects an answer sends now (a watch's
	// initial events), and takes it as sent; nil when it changes nothing.
	Served() func(raw []byte) []byte
	// Pass begins a pass of a watch over the objects it serves: fn returns an object as revised
	// now and whether that differs from what the watch sent before (it goes as MODIFIED); next
	// is closed at the next revision. fn is nil when nothing can have changed.
	Pass() (fn func(raw []byte) ([]byte, bool), next <-chan struct{})
}

// ServeList answers a list from the store: every object the namespace and selectors select, in
// the client's format, at the store's resourceVersion (limit is not applied: one complete page).
// The list is written item by item, never built whole: a JSON list streams in one pass; a
// protobuf list, whose envelope announces its length, first measures its items (holding only
// references to them, and the ones a filter rewrote) and then writes them.
func (s *Store) ServeList(w http.ResponseWriter, sv Serving) {
	ri := sv.Info
	sel, err := wire.NewSelector(ri.Namespace, ri.LabelSelector, ri.FieldSelector)
	if err != nil {
		wire.WriteStatus(w, ri.Accept, http.StatusBadRequest, err.Error())
		return
	}
	objs, rv, _, err := s.snapshot()
	if err != nil {
		wire.WriteStatus(w, ri.Accept, http.StatusServiceUnavailable, err.Error())
		return
	}
	w.Header().Set("Cache-Control", "no-cache, private")
	if !ri.Accept.IsProtobuf() {
		s.writeJSONList(w, sv, objs, sel, strconv.FormatUint(rv, 10))
		return
	}
	s.writeProtoList(w, sv, objs, sel, strconv.FormatUint(rv, 10))
}

// writeJSONList writes a JSON list of objs in one pass.
func (s *Store) writeJSONList(w http.ResponseWriter, sv Serving, objs []*object, sel wire.Selector, rvs string) {
	av, kind := s.itemType()
	w.Header().Set("Content-Type", wire.MediaJSON)
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, listWriteBuffer)
	_, _ = bw.Write(wire.JSONListHead(av, kind))
	n := 0
	for _, o := range objs {
		if raw, ok := sv.out(o, sel, false); ok {
			if n > 0 {
				_ = bw.WriteByte(',')
			}
			_, _ = bw.Write(wire.JSONListItem(raw))
			n++
		}
	}
	_, _ = bw.Write(wire.JSONListTail(rvs))
	_ = bw.Flush()
}

// writeProtoList writes a protobuf list of objs, whose envelope announces its length: it first
// measures the items (holding only references to them, and the ones a filter rewrote), then
// writes them.
func (s *Store) writeProtoList(w http.ResponseWriter, sv Serving, objs []*object, sel wire.Selector, rvs string) {
	av, kind := s.itemType()
	meta := wire.ProtoListMeta(rvs)
	size := len(meta)
	items := make([][]byte, 0, len(objs))
	for _, o := range objs {
		raw, ok := sv.out(o, sel, true)
		if !ok {
			continue
		}
		if _, _, msg, err := wire.DecodeProtoEnvelope(raw); err == nil {
			items = append(items, msg)
			size += wire.ProtoListItemLen(len(msg))
		}
	}
	objs = nil
	head, tail := wire.ProtoListHead(av, kind, size), wire.ProtoListTail()
	h := w.Header()
	h.Set("Content-Type", wire.MediaProtobuf)
	h.Set("Content-Length", strconv.Itoa(len(head)+size+len(tail)))
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, listWriteBuffer)
	_, _ = bw.Write(head)
	_, _ = bw.Write(meta)
	var ih [16]byte
	for i, msg := range items {
		_, _ = bw.Write(wire.AppendProtoListItemHead(ih[:0], len(msg)))
		if _, err := bw.Write(msg); err != nil {
			return // the client is gone
		}
		items[i] = nil // a rewritten item is garbage once written
	}
	_, _ = bw.Write(tail)
	_ = bw.Flush()
}

// listWriteBuffer is how much of a list is written to the client at once.
const listWriteBuffer = 32 << 10

// out returns an object as this client gets it, or false when it is not for this client.
func (sv Serving) out(o *object, sel wire.Selector, pb bool) ([]byte, bool) {
	if !o.matches(sel) {
		return nil, false
	}
	raw := o.raw
	if sv.Transform != nil {
		var drop bool
		if raw, drop = sv.Transform(raw); drop {
			return nil, false
		}
	}
	raw, err := wire.Convert(raw, pb)
	return raw, err == nil
}

// ServeWatch answers a watch from the store: from the client's resourceVersion when the window
// still holds what came after it (else 410 Expired, so it re-lists), or from the current state
// as ADDED events for resourceVersion "" or "0" and for sendInitialEvents. It ends at
// timeoutSeconds, when the client leaves, when a write waits past Serving.WriteTimeout, or when
// the client falls behind what the window keeps for it (readers.go).
func (s *Store) ServeWatch(w http.ResponseWriter, r *http.Request, sv Serving) {
	ri := sv.Info
	sel, err := wire.NewSelector(ri.Namespace, ri.LabelSelector, ri.FieldSelector)
	if err != nil {
		wire.WriteStatus(w, ri.Accept, http.StatusBadRequest, err.Error())
		return
	}
	rd := s.addReader() // from now on the window keeps what this watch has not read
	defer s.removeReader(rd)
	sw := &storeWatch{s: s, sv: sv, sel: sel, pb: ri.Accept.IsProtobuf(), rd: rd}
	objs, ok := sw.begin(w)
	if !ok {
		return
	}
	wt := sv.WriteTimeout
	if wt <= 0 {
		wt = watchWriteTimeout
	}
	sw.ww = wire.StartWatch(w, sw.pb, wt)
	defer sw.ww.End()
	sw.ww.APIVersion, sw.ww.Kind = s.itemType()
	if sw.initial(objs) {
		sw.keep(r.Context())
	}
}

// storeWatch is one watch being answered from the store.
type storeWatch struct {
	s      *Store
	sv     Serving
	sel    wire.Selector
	pb     bool
	rd     *reader
	ww     *wire.WatchWriter
	from   uint64 // the resourceVersion the watch starts from: the client has what came before
	cursor uint64 // where the watch reads the window next
	sent   uint64 // the resourceVersion a bookmark may carry: never past an event not sent yet
}

// initialEvents reports whether the watch starts with the current state as ADDED events.
func (sw *storeWatch) initialEvents() bool {
	ri := sw.sv.Info
	return ri.SendInitialEvents || ri.ResourceVersion == "" || ri.ResourceVersion == "0"
}

// begin finds where the watch starts: the store's objects for initial events, else the
// client's resourceVersion in the window; false when the client has its answer already (an
// error: 410 Expired for a resourceVersion the window no longer holds).
func (sw *storeWatch) begin(w http.ResponseWriter) ([]*object, bool) {
	ri := sw.sv.Info
	var objs []*object
	var err error
	if sw.initialEvents() {
		objs, sw.from, sw.cursor, err = sw.s.snapshot()
	} else {
		sw.from, err = strconv.ParseUint(ri.ResourceVersion, 10, 64)
		if err != nil {
			wire.WriteStatus(w, ri.Accept, http.StatusBadRequest, "resourceVersion "+strconv.Quote(ri.ResourceVersion)+" is not a resource version")
			return nil, false
		}
		sw.cursor, err = sw.s.cursorAfter(sw.from)
	}
	switch {
	case err == ErrExpired:
		writeExpired(w, ri, sw.pb)
		return nil, false
	case err != nil:
		wire.WriteStatus(w, ri.Accept, http.StatusServiceUnavailable, err.Error())
		return nil, false
	}
	sw.rd.cursor.Store(sw.cursor)
	return objs, true
}

// initial sends the initial events (objs as ADDED; the initial-events-end bookmark when the
// client asked for it) and flushes them; false when the client is gone.
func (sw *storeWatch) initial(objs []*object) bool {
	sv, ww := sw.sv, sw.ww
	if sv.Revisions != nil && sw.initialEvents() {
		sv.Revisions.Served() // the initial events go through Transform, which revises them
	}
	for _, o := range objs {
		if raw, ok := sv.out(o, sw.sel, sw.pb); ok && !ww.Send(wire.EventAdded, raw) {
			return false
		}
	}
	if sv.Info.SendInitialEvents && sv.Info.AllowWatchBookmarks {
		ww.Bookmark(strconv.FormatUint(sw.from, 10), true)
	}
	return ww.Flush()
}

// keep keeps the watch open after its initial events: the store's events and the revisions'
// changes as they come, a bookmark every BookmarkEvery, until timeoutSeconds (30 min), the
// client leaves or the watch must end.
func (sw *storeWatch) keep(ctx context.Context) {
	every := sw.sv.BookmarkEvery
	if every <= 0 {
		every = 10 * time.Second
	}
	sw.sent = sw.from
	wire.KeepWatch(ctx, sw.sv.Info.WatchTimeout(30*time.Minute), every, sw.pass, sw.tick)
}

// pass sends the store's events the watch has not read and what the revisions changed, and
// returns what wakes the next pass; false when the watch ends (the client is gone, or it fell
// behind the window: an ERROR event, Expired, so it re-lists).
func (sw *storeWatch) pass() (wire.Wakes, bool) {
	s, sv, ww := sw.s, sw.sv, sw.ww
	evs, nextCursor, rv, wake, err := s.read(sw.rd, sw.cursor)
	if err != nil {
		obj, _ := wire.EncodeStatus(expiredStatus(sv.Info), sw.pb)
		ww.Send(wire.EventError, obj)
		ww.Flush()
		return wire.Wakes{}, false
	}
	sw.cursor = nextCursor
	for _, ev := range evs {
		if ev.rv <= sw.from {
			continue // the client has it already
		}
		typ, raw, ok := sv.event(ev, sw.sel, sw.pb)
		if ok && !ww.Send(typ, raw) {
			return wire.Wakes{}, false
		}
	}
	if len(evs) > 0 && !ww.Flush() {
		return wire.Wakes{}, false
	}
	sw.sent = max(sw.sent, rv)
	var revised <-chan struct{}
	if sv.Revisions != nil {
		var ok bool
		if revised, ok = s.revise(ww, sv, sw.sel, sw.pb); !ok {
			return wire.Wakes{}, false
		}
	}
	return wire.Wakes{revised, wake}, true
}

// tick ends the watch when the store's data is no longer vouched for (Alive), else sends a
// bookmark when the client allows them; false ends the watch.
func (sw *storeWatch) tick() bool {
	if sw.sv.Alive != nil && !sw.sv.Alive() {
		return false
	}
	if !sw.sv.Info.AllowWatchBookmarks {
		return true
	}
	return sw.ww.Bookmark(strconv.FormatUint(sw.sent, 10), false) && sw.ww.Flush()
}

// revise sends, as MODIFIED, every object of the client's selection that a revision changed
// since the watch last looked: the store's object through Transform, as every object it is sent
// (Transform applies the revision; the revision's own output only without one).
func (s *Store) revise(ww *wire.WatchWriter, sv Serving, sel wire.Selector, pb bool) (<-chan struct{}, bool) {
	fn, next := sv.Revisions.Pass()
	if fn == nil {
		return next, true
	}
	objs, _, _, err := s.snapshot()
	if err != nil {
		return next, true
	}
	sent := false
	for _, o := range objs {
		if !o.matches(sel) {
			continue
		}
		raw, moved := fn(o.raw)
		if !moved {
			continue
		}
		if sv.Transform != nil {
			// Transform applies the revision of the moment itself: it is given the store's bytes
			// (the cloud's word), never the revision's output (issue 30).
			var drop bool
			if raw, drop = sv.Transform(o.raw); drop {
				continue
			}
		}
		if raw, err := wire.Convert(raw, pb); err == nil {
			if !ww.Send(wire.EventModified, raw) {
				return next, false
			}
			sent = true
		}
	}
	return next, !sent || ww.Flush()
}

// event returns what one store event becomes for this client: an object that enters its
// selection is ADDED, one that leaves it (or that its filters remove) is DELETED.
func (sv Serving) event(ev event, sel wire.Selector, pb bool) (string, []byte, bool) {
	o := ev.obj
	in := o.matches(sel)
	typ := ev.typ
	if ev.typ == wire.EventModified && ev.prev != nil {
		was := ev.prev.matches(sel)
		switch {
		case !in && !was:
			return "", nil, false
		case in && !was:
			typ = wire.EventAdded
		case !in && was:
			typ = wire.EventDeleted
		}
	} else if !in {
		return "", nil, false
	}
	raw := o.raw
	if sv.Transform != nil && typ != wire.EventDeleted {
		if out, drop := sv.Transform(raw); drop {
			typ = wire.EventDeleted
		} else {
			raw = out
		}
	}
	raw, err := wire.Convert(raw, pb)
	return typ, raw, err == nil
}

func expiredStatus(ri *wire.RequestInfo) *metav1.Status {
	st := wire.NewStatus(http.StatusGone, "too old resource version: "+ri.ResourceVersion)
	st.Reason = metav1.StatusReasonExpired
	return st
}

// writeExpired answers 410 Gone, reason Expired: the client re-lists.
func writeExpired(w http.ResponseWriter, ri *wire.RequestInfo, pb bool) {
	body, ct := wire.EncodeStatus(expiredStatus(ri), pb)
	h := w.Header()
	h.Set("Content-Type", ct)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusGone)
	_, _ = w.Write(body)
}
