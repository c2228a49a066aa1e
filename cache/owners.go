package cache

import (
	"strings"
)

// Foreign says whether an owner is not the node's own: component@credential.
func Foreign(owner string) bool { return strings.Contains(owner, "@") }

// ownerID interns an owner's name.
func (s *Store) ownerID(name string) int32 {
	s.omu.Lock()
	defer s.omu.Unlock()
	if id, ok := s.ownerIDs[name]; ok {
		return id
	}
	id := int32(len(s.owners))
	s.owners = append(s.owners, name)
	s.ownerAt = append(s.ownerAt, 0)
	s.localBytes = append(s.localBytes, 0)
	s.foreign = append(s.foreign, Foreign(name))
	s.ownerIDs[name] = id
	return id
}

func (s *Store) lookupOwner(name string) (int32, bool) {
	s.omu.Lock()
	defer s.omu.Unlock()
	id, ok := s.ownerIDs[name]
	return id, ok
}

func (s *Store) ownerName(id int32) string {
	s.omu.Lock()
	defer s.omu.Unlock()
	return s.owners[id]
}

func (s *Store) touch(owner int32, at uint32) {
	s.omu.Lock()
	if at > s.ownerAt[owner] {
		s.ownerAt[owner] = at
	}
	s.omu.Unlock()
}

func (s *Store) addLocal(owner int32, n int64) {
	s.omu.Lock()
	s.localBytes[owner] += n
	if s.foreign[owner] {
		s.foreignSum += n
	}
	s.omu.Unlock()
}

// ForeignLocalBytes is what the offline changes of the owners that are not the node's own take.
func (s *Store) ForeignLocalBytes() int64 {
	s.omu.Lock()
	defer s.omu.Unlock()
	return s.foreignSum
}

func (s *Store) isForeign(owner int32) bool {
	s.omu.Lock()
	defer s.omu.Unlock()
	return s.foreign[owner]
}

func (s *Store) local(owner int32) int64 {
	s.omu.Lock()
	defer s.omu.Unlock()
	return s.localBytes[owner]
}
