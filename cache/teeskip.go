package cache

import "nodehub/wire"

// holds reports whether the cache already holds what a cloud answer held whole (raw: a get or
// list the hub read whole) would write, so that it need not be teed at all — no copy of its
// bytes, no work for the writer, which would write nothing: an object at the very
// resourceVersion of the owner's copy (Batch.flush writes only a newer one), or a whole list at
// the resourceVersion of its scope's complete record (a re-list that changed nothing: Stream's
// unchanged, which keeps none of its items). A part of a list (part) is never the whole. The
// store says what the cache holds only while the writer holds nothing of the resource not yet
// written (settled): else the answer is teed, in its order behind what is queued.
func (m *Manager) holds(r Resource, kind int, sel wire.Selector, part bool, raw []byte) bool {
	if kind != StreamObject && kind != StreamList || !m.Writer.settled(r) {
		return false
	}
	switch kind {
	case StreamObject:
		v, ok := wire.VersionOf(raw)
		if !ok || v.Name == "" || v.ResourceVersion == "" {
			return false
		}
		rv, local, cached := m.Store.head(Key{Resource: r, Namespace: v.Namespace, Name: v.Name})
		return cached && !local && rv == v.ResourceVersion
	case StreamList:
		rv, ok := wire.ListResourceVersionOf(raw)
		if part || !ok || rv == "" {
			return false
		}
		rec, err := m.Store.List(r, sel.Namespace, sel.LabelSelector, sel.FieldSelector)
		return err == nil && rec.Complete && rec.ResourceVersion == rv
	}
	return false
}

// settled reports whether the writer holds nothing of r not yet written: no queue, or an idle one
// with nothing queued, pending, dropped or remembered (what retire asks of a queue it removes).
func (w *Writer) settled(r Resource) bool {
	w.mu.Lock()
	q := w.queues[r]
	w.mu.Unlock()
	if q == nil {
		return true
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.running || len(q.ops) > 0 || q.dropped { // a running queue's batch is its goroutine's
		return false
	}
	b := q.b
	return len(b.order) == 0 && len(b.bookmarks) == 0 && !b.full
}

// heldItem reports whether a list's item is what the cache holds already, at the very
// resourceVersion of the owner's copy, with nothing of its key pending: then it is only seen (the
// list's reconcile keeps it) and neither read further nor queued (flush would write nothing).
// A re-list's resourceVersion moves on with anything in the cluster; its items mostly do not.
func (b *batch) heldItem(st *Stream, raw []byte) bool {
	v, ok := wire.VersionOf(raw)
	if !ok || v.Name == "" || v.ResourceVersion == "" {
		return false
	}
	k := Key{Resource: b.r, Namespace: v.Namespace, Name: v.Name}
	if _, pending := b.pending[k.ID()]; pending || k.validate() != nil {
		return false
	}
	rv, local, cached := b.w.store.head(k)
	if !cached || local || rv != v.ResourceVersion {
		return false
	}
	if st.seen != nil {
		st.seen[k.ID()] = true
	}
	return true
}
