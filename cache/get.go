package cache

import (
	"fmt"
	"sort"
)

// located is where an owner's record of an object is, taken under the log's lock.
type located struct {
	key string
	off int64
	n   uint32
}

// Get reads and checks an object. A record that fails its check is reported as ErrNotFound
// wrapped with ErrCorrupt, and the resource's lists become incomplete.
func (s *Store) Get(k Key) (*Header, []byte, error) {
	if err := k.validate(); err != nil {
		return nil, nil, err
	}
	l, _ := s.logFor(k.Resource, false)
	owner, ok := s.owners.lookup(k.Owner)
	if l == nil || !ok {
		return nil, nil, ErrNotFound
	}
	l.mu.RLock()
	r := l.get(owner, k.ID())
	if r == nil {
		l.mu.RUnlock()
		return nil, nil, ErrNotFound
	}
	loc := located{off: r.off, n: r.n}
	sg := l.seg.acquire()
	l.mu.RUnlock()
	defer sg.release()
	return l.read(sg, loc)
}

// read reads one object record, marking the lists incomplete when it is corrupt.
func (l *rlog) read(sg *segment, loc located) (*Header, []byte, error) {
	p, err := readRec(sg, loc.off, loc.n)
	if err == nil {
		var hdr, body []byte
		if hdr, body, err = p.open(); err == nil {
			h := &Header{}
			if err = h.unmarshal(hdr); err == nil {
				return h, body, nil
			}
			err = fmt.Errorf("%w: header: %v", ErrCorrupt, err)
		}
	}
	l.s.corrupt.Add(1)
	l.s.log.Warn("cache: a record failed its check and is not served", "log", l.name, "offset", loc.off, "err", err)
	l.mu.Lock()
	l.lose()
	l.mu.Unlock()
	return nil, nil, fmt.Errorf("%w: %w", ErrNotFound, err)
}

// Header reads an object's header.
func (s *Store) Header(k Key) (*Header, error) {
	h, _, err := s.Get(k)
	return h, err
}

// head returns what the index knows of an owner's object without reading it.
func (s *Store) head(k Key) (rv string, local, ok bool) {
	l, _ := s.logFor(k.Resource, false)
	owner, found := s.owners.lookup(k.Owner)
	if l == nil || !found {
		return "", false, false
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	r := l.get(owner, k.ID())
	if r == nil {
		return "", false, false
	}
	return r.rv, r.local, true
}

// Keys calls fn with every object of a resource an owner holds, in one namespace or ("") all of
// them, in namespace/name order.
func (s *Store) Keys(r Resource, namespace string, fn func(Key) error) error {
	for _, loc := range s.locate(r, namespace) {
		ns, name := splitID(loc.key)
		if err := fn(Key{Resource: r, Namespace: ns, Name: name}); err != nil {
			return err
		}
	}
	return nil
}

// locate lists where an owner's objects of a resource are, sorted by namespace and name.
func (s *Store) locate(r Resource, namespace string) []located {
	l, _ := s.logFor(r, false)
	owner, ok := s.owners.lookup(r.Owner)
	if l == nil || !ok {
		return nil
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.locate(owner, namespace)
}

func (l *rlog) locate(owner int32, namespace string) []located {
	var out []located
	for key, sl := range l.objs {
		if namespace != "" {
			ns, _ := splitID(key)
			if ns != namespace {
				continue
			}
		}
		if i := sl.find(owner); i >= 0 {
			out = append(out, located{key: key, off: sl.holds[i].r.off, n: sl.holds[i].r.n})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		ni, mi := splitID(out[i].key)
		nj, mj := splitID(out[j].key)
		if ni != nj {
			return ni < nj
		}
		return mi < mj
	})
	return out
}
