package pool

// What the event window keeps alive counts against the store's bounds. Most events share their
// object's bytes with the store (the latest version of a living object); an event of a deleted
// object, or of a version since replaced, keeps bytes the objects no longer hold. Those count
// with the objects against MaxObjects and MaxBytes: past them the oldest events go, and a watch
// behind them gets 410 Expired and lists again (from the store). A re-sync that replaced every
// object thus costs no more than the bound, not the bound twice or three times over.

// hold records that one more event of the window holds o (lock held).
func (s *Store) hold(o *object) {
	if o.refs++; o.refs == 1 && !s.current(o) {
		s.keep(o, 1)
	}
}

// release records that an event holding o left the window (lock held).
func (s *Store) release(o *object) {
	if o.refs--; o.refs == 0 && !s.current(o) {
		s.keep(o, -1)
	}
}

// retire records that o is no longer the store's object (replaced or deleted): if events hold
// it, the window alone keeps it now (lock held).
func (s *Store) retire(o *object) {
	if o.refs > 0 {
		s.keep(o, 1)
	}
}

func (s *Store) keep(o *object, sign int) {
	s.keptN += sign
	s.keptBytes += int64(sign) * int64(len(o.raw))
}

// current reports whether o is the store's object of its key (lock held).
func (s *Store) current(o *object) bool { return s.objs[o.key()] == o }

// windowOver reports whether the window must lose its oldest event: the objects and what the
// window alone keeps are past the store's bounds, or it holds more events than objects the store
// may hold; or, beyond the last keep events (a relist's difference, handed to the watches as one
// batch while it fits the store's bounds), it is past MaxEvents or MaxEventBytes and every open
// watch has read its oldest event, or past holdFactor times them (readers.go) (lock held).
func (s *Store) windowOver(keep int) bool {
	maxN, maxB := s.bounds()
	if len(s.objs)+s.keptN > maxN || s.objBytes+s.keptBytes > maxB || len(s.events) > maxN {
		return true
	}
	n, b := s.MaxEvents, s.MaxEventBytes
	if n <= 0 {
		n = 500
	}
	if b <= 0 {
		b = 2 << 20
	}
	if len(s.events) <= max(1, keep) || len(s.events) <= n && s.eventBytes <= b {
		return false
	}
	return len(s.events) > holdFactor*n || s.eventBytes > holdFactor*b || !s.unread()
}

// Held returns what the store holds against its bounds: the objects and the older copies its
// event window alone keeps, in bytes and in number.
func (s *Store) Held() (bytes int64, n int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.objBytes + s.keptBytes, len(s.objs) + s.keptN
}
