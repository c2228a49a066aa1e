package cache

import (
	"strings"
	"time"
)

// DropOwner removes a component's whole cache: its own and that of its requests that carried
// their own credentials (component@…). It returns how many owners went.
func (s *Store) DropOwner(component string) (int, error) {
	if component == "" || strings.ContainsAny(component, "/@") {
		return 0, ErrBadKey
	}
	var drop []string
	for _, o := range s.Owners() {
		if o == component || strings.HasPrefix(o, component+"@") {
			drop = append(drop, o)
		}
	}
	for _, o := range drop {
		if err := s.dropOwner(o); err != nil {
			return 0, err
		}
	}
	return len(drop), nil
}

// dropOwner appends a drop record to every log the owner holds something in.
func (s *Store) dropOwner(name string) error {
	owner, ok := s.owners.lookup(name)
	if !ok {
		return nil
	}
	var err error
	s.eachLog(func(l *rlog) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if err != nil || !l.holdsAny(owner) {
			return
		}
		l.buf = dropPayload(l.room(), name, l.s.now())
		err = l.write(l.buf, nil)
		if err == nil && l.compactDue() {
			_ = l.compact()
		}
	})
	return err
}

func (l *rlog) holdsAny(owner int32) bool {
	for k := range l.lists {
		if k.owner == owner {
			return true
		}
	}
	for _, sl := range l.objs {
		if sl.find(owner) >= 0 {
			return true
		}
	}
	return false
}

// Owners lists the caches' owners (components, and component@credential) that hold anything.
func (s *Store) Owners() []string {
	n := s.owners.count()
	held := make([]bool, n)
	s.eachLog(func(l *rlog) {
		l.mu.RLock()
		for k := range l.lists {
			if int(k.owner) < n {
				held[k.owner] = true
			}
		}
		for _, sl := range l.objs {
			for _, h := range sl.holds {
				if int(h.owner) < n {
					held[h.owner] = true
				}
			}
		}
		l.mu.RUnlock()
	})
	var out []string
	for i, ok := range held {
		if ok {
			out = append(out, s.owners.name(int32(i)))
		}
	}
	return out
}

// RemoveOlder removes the cached objects of a resource (every owner, every version and group)
// written longer than age ago. It returns how many went.
func (s *Store) RemoveOlder(resource string, age time.Duration, now time.Time) (int, error) {
	limit := now.Add(-age).Unix()
	n := 0
	var err error
	s.eachLog(func(l *rlog) {
		if res, _, _, _ := parseLogName(l.name); res != resource || err != nil {
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		type gone struct {
			key   string
			owner int32
		}
		var old []gone
		for key, sl := range l.objs {
			for _, h := range sl.holds {
				if int64(h.r.at) < limit {
					old = append(old, gone{key, h.owner})
				}
			}
		}
		for _, g := range old {
			ns, name := splitID(g.key)
			l.buf = delPayload(l.room(), s.owners.name(g.owner), uint32(now.Unix()), ns, name)
			if err = l.write(l.buf, nil); err != nil {
				return
			}
			n++
		}
		if l.compactDue() {
			_ = l.compact()
		}
	})
	return n, err
}

// AgeOut removes the caches of owners that wrote nothing for longer than unused.
func (s *Store) AgeOut(unused time.Duration, now time.Time) ([]string, error) {
	limit := now.Add(-unused).Unix()
	var gone []string
	for _, o := range s.Owners() {
		id, _ := s.owners.lookup(o)
		if int64(s.owners.lastWrite(id)) < limit {
			if err := s.dropOwner(o); err != nil {
				return gone, err
			}
			gone = append(gone, o)
		}
	}
	return gone, nil
}
