package cache

import "nodehub/wire"

// holds reports whether the cache already holds what a cloud answer held whole (raw: a get or
// list the hub read whole) would write, so that it need not be teed at all — no copy of its
// bytes, no work for the writer, which would write nothing: an object at the very
// resourceVersion of the owner's copy (Batch.flush writes only a newer one), or a whole list at
// the resourceVersion of its scope's complete record (a re-list that changed nothing: Stream's
// unchanged, which keeps none of its items). A part of a list (part) is never the whole.
func (m *Manager) holds(r Resource, kind int, sel wire.Selector, part bool, raw []byte) bool {
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
