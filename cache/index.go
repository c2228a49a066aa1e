package cache

import (
	"encoding/json"
	"hash/crc32"
	"slices"
)

// rec is one put record: one version of one object, held by one or more owners.
type rec struct {
	off   int64
	n     uint32 // frame and payload
	at    uint32
	refs  int32
	local bool
	sum   uint32 // CRC-32C of header and body: identical bytes are stored once
	rv    string
}

// hold says that an owner holds a record (through its own put, or a ref record of refN bytes).
type hold struct {
	owner int32
	r     *rec
	refN  uint32
}

type slot struct{ holds []hold }

func (sl *slot) find(owner int32) int {
	return slices.IndexFunc(sl.holds, func(h hold) bool { return h.owner == owner })
}

type listKey struct {
	owner int32
	listScope
}

type listState struct {
	rec   ListRecord
	n     uint32 // the list record
	metaN uint32 // the newest listmeta record since
}

// lose records that objects were lost: every list of the resource is incomplete until it is
// listed again in full (the kubelet is never answered a partial pod list as if it were whole).
func (l *rlog) lose() {
	for _, ls := range l.lists {
		if ls.rec.Complete {
			ls.rec.Complete = false
			l.metaDue = true
		}
	}
}

// apply brings the index up to date with one record at off of n bytes. target, when not nil, is
// for a ref the record it points to (known when the hub writes it; looked up by offset when
// loading), and for a put the record as its writer knows it (resourceVersion, local, checksum),
// so the hub's own write is not decompressed and checksummed again to index it.
func (l *rlog) apply(off int64, n uint32, p payload, target *rec) {
	owner := l.s.owners.id(p.owner)
	if p.typ != recDel && p.typ != recDrop {
		l.s.owners.touch(owner, p.at)
	}
	switch p.typ {
	case recPut:
		l.applyPut(off, n, p, owner, target)
	case recRef:
		l.applyRef(n, p, owner, target)
	case recDel:
		if key := id(p.ns, p.name); l.delHold(key, owner) {
			l.forget(owner, key)
		}
	case recList:
		l.applyList(n, p, owner)
	case recListMeta:
		l.applyListMeta(n, p, owner)
	case recDrop:
		l.applyDrop(owner)
	}
}

func (l *rlog) applyPut(off int64, n uint32, p payload, owner int32, r *rec) {
	if r == nil {
		hdr, scratch, err := p.openHeader(l.hdrBuf)
		l.hdrBuf = scratch // the next record's header is decoded into it: headerRV copies what it keeps
		if err != nil {
			l.unopened = true // its object is lost: no list that held it is whole
			return
		}
		rv, local, ok := headerRV(hdr)
		if !ok {
			l.unopened = true
			return
		}
		r = &rec{local: local, rv: rv, sum: crc32.Update(crc32.Checksum(p.header, crcTable), crcTable, p.body)}
	}
	r.off, r.n, r.at, r.refs = off, n, p.at, 1
	l.addLive(int64(n))
	if r.local {
		l.s.owners.addLocal(owner, int64(n))
	}
	if l.byOff != nil {
		l.byOff[off] = r
	}
	l.setHold(id(p.ns, p.name), hold{owner: owner, r: r})
}

func (l *rlog) applyRef(n uint32, p payload, owner int32, target *rec) {
	if target == nil && l.byOff != nil {
		target = l.byOff[p.target]
	}
	if target == nil {
		return // its object was in a lost region (the lists are incomplete already)
	}
	target.refs++
	l.addLive(int64(n))
	l.setHold(id(p.ns, p.name), hold{owner: owner, r: target, refN: n})
}

func (l *rlog) applyList(n uint32, p payload, owner int32) {
	var lr ListRecord
	if json.Unmarshal(p.body, &lr) != nil {
		return
	}
	k := listKey{owner, listScope{p.ns, p.ls, p.fs}}
	if old := l.lists[k]; old != nil {
		l.addLive(-(int64(old.n + old.metaN)))
	}
	l.lists[k] = &listState{rec: lr, n: n}
	l.addLive(int64(n))
}

func (l *rlog) applyListMeta(n uint32, p payload, owner int32) {
	ls := l.lists[listKey{owner, listScope{p.ns, p.ls, p.fs}}]
	if ls == nil {
		return
	}
	ls.rec.ResourceVersion, ls.rec.Complete = p.rv, p.complete
	l.addLive(int64(n) - int64(ls.metaN))
	ls.metaN = n
}

// applyDrop forgets everything an owner holds.
func (l *rlog) applyDrop(owner int32) {
	for k, sl := range l.objs {
		if i := sl.find(owner); i >= 0 {
			l.release(sl.holds[i])
			sl.holds = append(sl.holds[:i], sl.holds[i+1:]...)
			if len(sl.holds) == 0 {
				delete(l.objs, k)
			}
		}
	}
	for k, ls := range l.lists {
		if k.owner == owner {
			l.addLive(-(int64(ls.n + ls.metaN)))
			delete(l.lists, k)
		}
	}
}

// forget takes a deleted object out of the keys of its owner's lists: a list's keys are then what
// it holds, so a key it names that is not held was lost (a write that failed), never deleted. The
// keys are replaced, not changed in place: readers may hold the old slice.
func (l *rlog) forget(owner int32, key string) {
	for k, ls := range l.lists {
		if k.owner != owner {
			continue
		}
		keys := ls.rec.Keys
		if i, ok := slices.BinarySearch(keys, key); ok {
			ls.rec.Keys = slices.Concat(keys[:i:i], keys[i+1:])
		}
	}
}

func (l *rlog) setHold(key string, h hold) {
	sl := l.objs[key]
	if sl == nil {
		sl = &slot{holds: make([]hold, 0, 1)}
		l.objs[key] = sl
	}
	if i := sl.find(h.owner); i >= 0 {
		l.release(sl.holds[i])
		sl.holds[i] = h
		return
	}
	sl.holds = append(sl.holds, h)
}

func (l *rlog) delHold(key string, owner int32) bool {
	sl := l.objs[key]
	if sl == nil {
		return false
	}
	i := sl.find(owner)
	if i < 0 {
		return false
	}
	l.release(sl.holds[i])
	sl.holds = append(sl.holds[:i], sl.holds[i+1:]...)
	if len(sl.holds) == 0 {
		delete(l.objs, key)
	}
	return true
}

func (l *rlog) release(h hold) {
	l.addLive(-(int64(h.refN)))
	h.r.refs--
	if h.r.refs == 0 {
		l.addLive(-(int64(h.r.n)))
		if h.r.local {
			l.s.owners.addLocal(h.owner, -int64(h.r.n))
		}
	}
}

// get returns the record an owner holds for a key.
func (l *rlog) get(owner int32, key string) *rec {
	sl := l.objs[key]
	if sl == nil {
		return nil
	}
	if i := sl.find(owner); i >= 0 {
		return sl.holds[i].r
	}
	return nil
}

// addLive moves the live bytes of the log and of the store.
func (l *rlog) addLive(n int64) {
	l.live += n
	l.s.liveBytes.Add(n)
}

func (l *rlog) dead() int64 { return l.recordBytes() - l.live }
