package cache

import "nodehub/wire"

// Item is one cached object: its header and raw bytes (in Header.ContentType).
type Item struct {
	Header *Header
	Body   []byte
}

// Get reads one object. ErrNotFound when it is not cached (or its file failed its check).
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
}

// EachInList calls fn, in namespace/name order, for every cached object of r that the selector
// selects, reading one file at a time (memory does not grow with the number of objects).
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
	}
	err = s.eachObject(r, sel.Namespace, func(k Key, data []byte) error {
		h, body, err := decodeFile(data, r.Resource)
		if err != nil {
			s.quarantine(k.Path(), err) // corrupt: never served
			return nil
		}
		if !sel.MatchesMeta(h.Meta(), func() []byte { return body }) {
			return nil
		}
		if newerRV(h.ResourceVersion, res.ResourceVersion) {
			res.ResourceVersion = h.ResourceVersion
		}
		res.Count++
		return fn(Item{Header: h, Body: body})
	})
	return res, err
}

// Meta returns the header as wire.Meta.
func (it Item) Meta() wire.Meta { return it.Header.Meta() }
