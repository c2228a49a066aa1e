package cache

import (
	"encoding/json"
	"sort"
	"time"

	"nodehub/wire"
)

// ListRecord is what the cache remembers of one distinct list (namespace + label selector + field
// selector) of a resource: that it was seen, its resourceVersion, whether the objects on disk are
// all of it, and the keys its last complete answer held. Objects are stored once per resource
// whatever list brought them; a list is read back by evaluating its selectors over them, and an
// object leaves the disk when no list's last answer holds it any more.
type ListRecord struct {
	Namespace       string `json:"ns,omitempty"`
	LabelSelector   string `json:"labelSelector,omitempty"`
	FieldSelector   string `json:"fieldSelector,omitempty"`
	ResourceVersion string `json:"rv,omitempty"`
	// APIVersion and Kind are the items' (Pod for a PodList), so an empty list can be answered.
	APIVersion string    `json:"av,omitempty"`
	Kind       string    `json:"kind,omitempty"`
	Complete   bool      `json:"complete"`
	At         time.Time `json:"at"`
	Keys       []string  `json:"keys,omitempty"`
}

// Selector parses the record's scope.
func (r ListRecord) Selector() (wire.Selector, error) {
	return wire.NewSelector(r.Namespace, r.LabelSelector, r.FieldSelector)
}

func (r ListRecord) scope() listScope {
	return listScope{r.Namespace, r.LabelSelector, r.FieldSelector}
}

// PutList records a list (its keys included: written when a list is reconciled, not per event).
func (s *Store) PutList(r Resource, rec ListRecord) error {
	if err := r.validate(); err != nil {
		return err
	}
	js, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	l, err := s.logFor(r, true)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = listPayload(l.room(), r.Owner, l.s.now(), rec.scope(), js)
	return l.write(l.buf, nil)
}

// setListMeta moves a recorded list's resourceVersion and completeness with a small record (a
// bookmark does not rewrite the list's keys). A list never recorded is left alone.
func (s *Store) setListMeta(r Resource, sc listScope, rv string, complete bool) error {
	l, err := s.logFor(r, false)
	owner, ok := s.owners.lookup(r.Owner)
	if l == nil || err != nil || !ok {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ls := l.lists[listKey{owner, sc}]
	if ls == nil || ls.rec.ResourceVersion == rv && ls.rec.Complete == complete {
		return nil
	}
	l.buf = listMetaPayload(l.room(), r.Owner, l.s.now(), sc, rv, complete)
	return l.write(l.buf, nil)
}

// List returns the record of one list, or ErrNotFound.
func (s *Store) List(r Resource, ns, ls, fs string) (ListRecord, error) {
	l, _ := s.logFor(r, false)
	owner, ok := s.owners.lookup(r.Owner)
	if l == nil || !ok {
		return ListRecord{}, ErrNotFound
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	st := l.lists[listKey{owner, listScope{ns, ls, fs}}]
	if st == nil {
		return ListRecord{}, ErrNotFound
	}
	return st.rec, nil
}

// Lists returns every list record an owner has of a resource (sorted by scope).
func (s *Store) Lists(r Resource) ([]ListRecord, error) {
	l, _ := s.logFor(r, false)
	owner, ok := s.owners.lookup(r.Owner)
	if l == nil || !ok {
		return nil, nil
	}
	l.mu.RLock()
	var out []ListRecord
	for k, st := range l.lists {
		if k.owner == owner {
			out = append(out, st.rec)
		}
	}
	l.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].scope(), out[j].scope()
		if a.ns != b.ns {
			return a.ns < b.ns
		}
		if a.ls != b.ls {
			return a.ls < b.ls
		}
		return a.fs < b.fs
	})
	return out, nil
}

// MarkIncomplete records, for every list of a resource, that objects were lost (a full queue):
// each list is incomplete until it is listed again in full.
func (s *Store) MarkIncomplete(r Resource) error {
	recs, err := s.Lists(r)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if rec.Complete {
			if err := s.setListMeta(r, rec.scope(), rec.ResourceVersion, false); err != nil {
				return err
			}
		}
	}
	return nil
}
