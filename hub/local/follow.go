package local

import (
	"errors"
	"hash/fnv"
	"net/http"

	"nodehub/cache"
	"nodehub/wire"
)

// kubelet's offline watch of its Node follows the status writes applied offline to it, as the
// apiserver's watch follows every write: since v1.37 kubelet compares its node's new status with
// its informer's copy, not with a GET, and patches the difference from that copy. A watch that
// never showed its own offline patch leaves it comparing with a stale copy: a status it put back
// (Ready after "CSINode is not yet initialized", early in an outage) is never sent, and each
// later patch is applied to a copy that still holds the old one. Nothing else is followed: pods'
// statuses and other clients' nodes stay as their watches last showed them, so on the return
// their clients still find what the cloud has not heard (kubelet's status manager re-sends the
// pods' statuses because its informer's copies differ from them). A watch remembers a hash of
// each object it sent, bounded by its list.

// follower is what an offline watch sent of a followed resource.
type follower struct {
	next <-chan struct{}   // closed at the next offline change
	sent map[string]uint64 // namespace/name -> hash of the object as last sent
}

// newFollower returns a follower for a watch of ri, or nil when nothing it serves changes offline.
func (p *Proxy) newFollower(ri *wire.RequestInfo) *follower {
	if !changesOffline(ri) {
		return nil
	}
	return &follower{next: p.offlineChanges(), sent: map[string]uint64{}}
}

// changesOffline reports whether ri is kubelet's watch of nodes (of its own: the only one it
// changes offline).
func changesOffline(ri *wire.RequestInfo) bool {
	return ri.Group == "" && ri.Resource == "nodes" && ri.Component == "kubelet"
}

// saw records an object as sent; it reports whether it differs from what was sent before and
// whether anything was sent of it before.
func (fl *follower) saw(it cache.Item) (changed, known bool) {
	if fl == nil {
		return false, false
	}
	k := it.Header.Namespace + "/" + it.Header.Name
	h := fnv.New64a()
	h.Write(it.Body)
	sum := h.Sum64()
	old, known := fl.sent[k]
	fl.sent[k] = sum
	return !known || old != sum, known
}

// offlineChanges returns a channel closed at the next change applied offline.
func (p *Proxy) offlineChanges() <-chan struct{} {
	p.changeMu.Lock()
	defer p.changeMu.Unlock()
	if p.changed == nil {
		p.changed = make(chan struct{})
	}
	return p.changed
}

// appliedOffline wakes the offline watches: a change was applied offline.
func (p *Proxy) appliedOffline() {
	p.changeMu.Lock()
	defer p.changeMu.Unlock()
	if p.changed != nil {
		close(p.changed)
		p.changed = nil
	}
}

// follow sends, once an offline change was applied since the last pass, every object of the
// watch's list that changed since it was sent (MODIFIED; ADDED when never sent); it returns the
// channel of the next change, and false when the client is gone.
func (p *Proxy) follow(r *http.Request, req *Request, pl *listPlan, fl *follower, protobuf bool, send func(typ string, obj []byte) bool) (<-chan struct{}, bool) {
	select {
	case <-fl.next:
	default:
		return fl.next, true
	}
	fl.next = p.offlineChanges()
	release, ok := p.acquire(r, req)
	if !ok {
		return fl.next, false
	}
	defer release()
	gone := errors.New("local: watch client gone")
	_, err := p.each(pl, func(it cache.Item) error {
		changed, known := fl.saw(it)
		if !changed {
			return nil
		}
		obj, err := wire.Convert(it.Body, protobuf)
		if err != nil {
			return nil
		}
		typ := wire.EventAdded
		if known {
			typ = wire.EventModified
		}
		if !send(typ, obj) {
			return gone
		}
		return nil
	})
	return fl.next, !errors.Is(err, gone)
}
