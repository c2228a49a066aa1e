package pool

import (
	"context"

	"nodehub/wire"
)

// Follower is told what a store holds, in its goroutine (Store.Follow): List with every object
// (raw, as the store holds it) at the start and whenever the store's state had to be read again,
// then Event for each change. The bytes are the store's: read them, never change or keep them.
type Follower struct {
	List  func(items [][]byte)
	Event func(typ string, raw []byte)
}

// Follow hands f the store's objects and then its changes, as a watch from the store would,
// without HTTP or any encoding: for the hub's own readers of a pool-scope resource (the topology
// source), which then read nothing from the cloud that the store already reads. It returns when
// ctx ends (nil) or when the store can no longer be followed (ErrExpired: it emptied past its
// bounds, or f fell behind its event window; errNotSynced before its first list): the caller
// follows it again once it is Synced, or reads the resource some other way.
func (s *Store) Follow(ctx context.Context, f Follower) error {
	rd := s.addReader() // the window keeps what f has not been told (readers.go)
	defer s.removeReader(rd)
	objs, _, cursor, err := s.snapshot()
	if err != nil {
		return err
	}
	rd.cursor.Store(cursor)
	items := make([][]byte, len(objs))
	for i, o := range objs {
		items[i] = o.raw
	}
	objs = nil
	f.List(items)
	items = nil
	for {
		evs, next, _, wake, err := s.read(rd, cursor)
		if err != nil {
			return err
		}
		cursor = next
		for _, ev := range evs {
			switch ev.typ {
			case wire.EventAdded, wire.EventModified, wire.EventDeleted:
				f.Event(ev.typ, ev.obj.raw)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		}
	}
}
