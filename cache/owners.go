package cache

import (
	"strings"
	"sync"
)

// Foreign says whether an owner is not the node's own: component@credential.
func Foreign(owner string) bool { return strings.Contains(owner, "@") }

// ownerTable interns the owners' names (the index refers to an owner by its number) and keeps
// what the quotas and age-out need of each: when it last wrote, and what its offline changes take.
// Safe for concurrent use; it takes no other lock.
type ownerTable struct {
	mu         sync.Mutex
	names      []string
	ids        map[string]int32
	at         []uint32 // newest record of each owner (Unix seconds)
	localBytes []int64  // bytes of each owner's offline changes
	foreign    []bool   // each owner is Foreign
	foreignSum int64    // localBytes of the foreign owners together
}

// id interns an owner's name.
func (t *ownerTable) id(name string) int32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id, ok := t.ids[name]; ok {
		return id
	}
	if t.ids == nil {
		t.ids = map[string]int32{}
	}
	id := int32(len(t.names))
	t.names = append(t.names, name)
	t.at = append(t.at, 0)
	t.localBytes = append(t.localBytes, 0)
	t.foreign = append(t.foreign, Foreign(name))
	t.ids[name] = id
	return id
}

// lookup returns an owner's number, if it ever held anything.
func (t *ownerTable) lookup(name string) (int32, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	id, ok := t.ids[name]
	return id, ok
}

func (t *ownerTable) name(id int32) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.names[id]
}

// count is how many owners were interned (numbers 0 to count-1).
func (t *ownerTable) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.names)
}

// touch notes that an owner wrote a record at (Unix seconds).
func (t *ownerTable) touch(owner int32, at uint32) {
	t.mu.Lock()
	if at > t.at[owner] {
		t.at[owner] = at
	}
	t.mu.Unlock()
}

// lastWrite is when an owner last wrote (Unix seconds).
func (t *ownerTable) lastWrite(owner int32) uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.at[owner]
}

// addLocal moves the bytes an owner's offline changes take.
func (t *ownerTable) addLocal(owner int32, n int64) {
	t.mu.Lock()
	t.localBytes[owner] += n
	if t.foreign[owner] {
		t.foreignSum += n
	}
	t.mu.Unlock()
}

func (t *ownerTable) foreignLocal() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.foreignSum
}

func (t *ownerTable) isForeign(owner int32) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.foreign[owner]
}

func (t *ownerTable) local(owner int32) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.localBytes[owner]
}

// ForeignLocalBytes is what the offline changes of the owners that are not the node's own take.
func (s *Store) ForeignLocalBytes() int64 { return s.owners.foreignLocal() }
