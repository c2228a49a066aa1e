package cache

import "nodehub/wire"

// Item is one cached object: its header and raw bytes (in Header.ContentType).
type Item struct {
	Header *Header
	Body   []byte
}

// GetObject reads one object. ErrNotFound when it is not cached (or its record failed its check).
func (s *Store) GetObject(k Key) (Item, error) {
	h, body, err := s.Get(k)
	if err != nil {
		return Item{}, err
	}
	return Item{Header: h, Body: body}, nil
}

// ListResult describes a list read back from the cache.
type ListResult struct {
	// Record is the list's own record when this exact list (scope and selectors) was seen, else
	// the first complete record whose scope covers it, else nil (never listed).
	Record *ListRecord
	// ResourceVersion is the newest of the record's and the items' resourceVersions.
	ResourceVersion string
	Count           int
	// Partial is set when the answer may lack objects the cloud's list holds: the record is
	// incomplete (a write failed, a queue overflowed, the cache was full, a region of the log was
	// corrupt), or an object failed its check while being read. A kubelet must not be answered a
	// partial pod list as if it were whole.
	Partial bool
}

// EachInList calls fn, in namespace/name order, for every cached object of r that the selector
// selects, reading one record at a time (memory does not grow with the number of objects).
func (s *Store) EachInList(r Resource, sel wire.Selector, fn func(Item) error) (ListResult, error) {
	var res ListResult
	recs, err := s.Lists(r)
	if err != nil {
		return res, err
	}
	for i, rec := range recs {
		if rec.Namespace == sel.Namespace && rec.LabelSelector == sel.LabelSelector && rec.FieldSelector == sel.FieldSelector {
			res.Record = &recs[i]
			break
		}
	}
	if res.Record == nil {
		for i, rec := range recs {
			if rec.Complete && (rec.Namespace == "" || rec.Namespace == sel.Namespace) && rec.LabelSelector == "" && rec.FieldSelector == "" {
				res.Record = &recs[i]
				break
			}
		}
	}
	if res.Record != nil {
		res.ResourceVersion = res.Record.ResourceVersion
		res.Partial = !res.Record.Complete
	}
	l, _ := s.logFor(r, false)
	owner, ok := s.owners.lookup(r.Owner)
	if l == nil || !ok {
		return res, nil
	}
	l.mu.RLock()
	locs := l.locate(owner, sel.Namespace)
	sg := l.seg.acquire()
	l.mu.RUnlock()
	defer sg.release()
	if res.Record != nil && !res.Partial && !namesOnly(res.Record.Keys, sel.Namespace, locs) {
		res.Partial = true // the record names an object that is not held: a lost write
	}
	for _, loc := range locs {
		h, body, err := l.read(sg, loc)
		if err != nil {
			res.Partial = true // corrupt: never served, and the list is not whole
			continue
		}
		if !sel.MatchesMeta(h.Meta(), func() []byte { return body }) {
			continue
		}
		if newerRV(h.ResourceVersion, res.ResourceVersion) {
			res.ResourceVersion = h.ResourceVersion
		}
		res.Count++
		if err := fn(Item{Header: h, Body: body}); err != nil {
			return res, err
		}
	}
	return res, nil
}

// namesOnly reports whether every key of a list's record (in namespace, "" all) is among locs.
func namesOnly(keys []string, namespace string, locs []located) bool {
	held := make(map[string]struct{}, len(locs))
	for _, loc := range locs {
		held[loc.key] = struct{}{}
	}
	for _, k := range keys {
		if ns, _ := splitID(k); namespace != "" && ns != namespace {
			continue
		}
		if _, ok := held[k]; !ok {
			return false
		}
	}
	return true
}

// holdsAll reports whether r's owner holds every one of keys.
func (s *Store) holdsAll(r Resource, keys []string) bool {
	l, _ := s.logFor(r, false)
	owner, ok := s.owners.lookup(r.Owner)
	if l == nil || !ok {
		return len(keys) == 0
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	for _, k := range keys {
		if l.get(owner, k) == nil {
			return false
		}
	}
	return true
}

// Meta returns the header as wire.Meta.
func (it Item) Meta() wire.Meta { return it.Header.Meta() }
