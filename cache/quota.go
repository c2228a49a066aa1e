package cache

import (
	"fmt"
	"sort"
)

const (
	// DefaultLocalQuota bounds what one owner's offline changes (events created offline, above
	// all) take when --cache-max-bytes is not set; with it, an owner gets an eighth of it.
	DefaultLocalQuota = 8 << 20
	// DefaultForeignBudget bounds what the offline changes of every owner but the node's own
	// (component@credential: pods and anything else with a credential of its own) take together
	// when --cache-max-bytes is not set; with it, they share an eighth of it. So however many
	// credentials a pod makes up, its offline writes cannot fill the node's disk.
	DefaultForeignBudget = 16 << 20
)

// makeRoom keeps an owner's offline changes within its quota, the offline changes of the owners
// that are not the node's own within their budget together, and the cache within
// --cache-max-bytes, by removing that owner's oldest offline changes of the resource.
func (l *rlog) makeRoom(owner int32, k Key, need int64) error {
	quota, budget := int64(DefaultLocalQuota), int64(DefaultForeignBudget)
	max := l.s.maxBytes.Load()
	if max > 0 {
		quota, budget = max/8, max/8
	}
	foreign := l.s.owners.isForeign(owner)
	if foreign {
		quota = min(quota, budget)
	}
	if need > quota {
		return fmt.Errorf("cache: offline change of %d bytes is larger than the quota of %d: %w", need, quota, ErrFull)
	}
	var freed int64
	if old := l.get(owner, k.ID()); old != nil && old.refs == 1 {
		freed = int64(old.n) // replaced
	}
	over := func() bool {
		if l.s.owners.local(owner)+need-freed > quota {
			return true
		}
		if foreign && l.s.owners.foreignLocal()+need-freed > budget {
			return true
		}
		return max > 0 && l.s.Size()+need-freed > max
	}
	if !over() {
		return nil
	}
	for _, key := range l.localChanges(owner, k.ID()) {
		if !over() {
			break
		}
		ns, name := splitID(key)
		l.buf = delPayload(l.room(), k.Owner, l.s.now(), ns, name)
		if err := l.write(l.buf, nil); err != nil {
			return err
		}
	}
	if over() {
		return fmt.Errorf("cache: offline change of %s: %w", k.Path(), ErrFull)
	}
	return nil
}

// localChanges lists the keys of an owner's offline changes of the resource but except, oldest
// (first written) first.
func (l *rlog) localChanges(owner int32, except string) []string {
	type cand struct {
		key string
		off int64
	}
	var cands []cand
	for key, sl := range l.objs {
		if i := sl.find(owner); i >= 0 && sl.holds[i].r.local && key != except {
			cands = append(cands, cand{key, sl.holds[i].r.off})
		}
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].off < cands[j].off })
	keys := make([]string, len(cands))
	for i, c := range cands {
		keys[i] = c.key
	}
	return keys
}
