package pool

import (
	"bufio"
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
	av, kind := s.itemType()
	rvs := strconv.FormatUint(rv, 10)
	h := w.Header()
	h.Set("Cache-Control", "no-cache, private")
	if !ri.Accept.IsProtobuf() {
		h.Set("Content-Type", wire.MediaJSON)
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
		return
	}
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
	pb := ri.Accept.IsProtobuf()
	initial := ri.SendInitialEvents || ri.ResourceVersion == "" || ri.ResourceVersion == "0"
	rd := s.addReader() // from now on the window keeps what this watch has not read
	defer s.removeReader(rd)
	var from, cursor uint64
	var objs []*object
	if initial {
		objs, from, cursor, err = s.snapshot()
	} else {
		from, err = strconv.ParseUint(ri.ResourceVersion, 10, 64)
		if err != nil {
			wire.WriteStatus(w, ri.Accept, http.StatusBadRequest, "resourceVersion "+strconv.Quote(ri.ResourceVersion)+" is not a resource version")
			return
		}
		cursor, err = s.cursorAfter(from)
	}
	switch {
	case err == ErrExpired:
		writeExpired(w, ri, pb)
		return
	case err != nil:
		wire.WriteStatus(w, ri.Accept, http.StatusServiceUnavailable, err.Error())
		return
	}
	rd.cursor.Store(cursor)
	wt := sv.WriteTimeout
	if wt <= 0 {
		wt = watchWriteTimeout
	}
	ww := wire.StartWatch(w, pb, wt)
	defer ww.End()
	ww.APIVersion, ww.Kind = s.itemType()
	if sv.Revisions != nil && initial {
		sv.Revisions.Served() // the initial events go through Transform, which revises them
	}
	for _, o := range objs {
		if raw, ok := sv.out(o, sel, pb); ok && !ww.Send(wire.EventAdded, raw) {
			return
		}
	}
	objs = nil
	if ri.SendInitialEvents && ri.AllowWatchBookmarks {
		ww.Bookmark(strconv.FormatUint(from, 10), true)
	}
	if !ww.Flush() {
		return
	}

	end := time.NewTimer(ri.WatchTimeout(30 * time.Minute))
	defer end.Stop()
	every := sv.BookmarkEvery
	if every <= 0 {
		every = 10 * time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	sent := from // the resourceVersion a bookmark may carry: never past an event not sent yet
	for {
		evs, nextCursor, rv, wake, err := s.read(rd, cursor)
		if err != nil {
			obj, _ := wire.EncodeStatus(expiredStatus(ri), pb)
			ww.Send(wire.EventError, obj)
			ww.Flush()
			return
		}
		cursor = nextCursor
		for _, ev := range evs {
			if ev.rv <= from {
				continue // the client has it already
			}
			typ, raw, ok := sv.event(ev, sel, pb)
			if ok && !ww.Send(typ, raw) {
				return
			}
		}
		if len(evs) > 0 && !ww.Flush() {
			return
		}
		sent = max(sent, rv)
		var revised <-chan struct{}
		if sv.Revisions != nil {
			var ok bool
			if revised, ok = s.revise(ww, sv, sel, pb); !ok {
				return
			}
		}
		select {
		case <-revised:
		case <-r.Context().Done():
			return
		case <-end.C:
			return
		case <-wake:
		case <-tick.C:
			if sv.Alive != nil && !sv.Alive() {
				return
			}
			if ri.AllowWatchBookmarks {
				if !ww.Bookmark(strconv.FormatUint(sent, 10), false) || !ww.Flush() {
					return
				}
			}
		}
	}
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
