package endpointfix

// The race after the return: kubelet's newer report of a pod (web-1 turned ready) goes to the
// cloud through the hub, the EndpointSlice controller writes the slice that says so, and that
// slice can reach the hub before the cloud's answer to the status write does. Corrected then with
// the older report, the cloud's slice reached every watch of it from the cloud as the old report
// said, and nothing would ever send it again: the cloud writes the slice once, and a watch from
// the cloud gets no MODIFIED from the hub. So from the moment kubelet's status write of a pod
// being corrected leaves for the cloud until its answer is in, the cloud may know more than the
// hub: an endpoint of that pod at the address kubelet reported passes as the cloud says (its
// readiness is the cloud's, at least as new as the hub's) in any slice but the very one the hub
// served corrected before (same resourceVersion: the cloud's old word, kept corrected so it does
// not flap), and one at another address (the dead one of before the outage) is still corrected.

// Sending takes kubelet's status write of pod namespace/name on its way to the cloud (online). It
// returns what to call when the write ended, answered or not; the cloud's answer itself comes
// through ReportedOnline before that. A pod not being corrected is left alone.
func (f *Fixer) Sending(namespace, name string) (done func()) {
	k := namespace + "/" + name
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.entries[k]
	if e == nil {
		return func() {}
	}
	e.pending++
	if e.pending == 1 {
		f.publishLocked()
	}
	return func() { f.sent(k, e) }
}

// sent ends one write of Sending.
func (f *Fixer) sent(k string, e *entry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e.pending--
	if e.pending == 0 && f.entries[k] == e {
		f.publishLocked()
	}
}

// defers reports whether an endpoint of slice (namespace/name, at resourceVersion rv), of a pod
// whose newer report is on its way to the cloud, is left as the cloud says: it is at the address
// kubelet reported, and the slice is not the very one served corrected before the write left
// (that one is the cloud's old word: left as it was served, it does not flap).
func (p Pod) defers(slice, rv string, addrs []string, reported []string) bool {
	if !p.Pending || len(reported) == 0 || reported[0] == "" || len(addrs) != len(reported) {
		return false
	}
	if old, ok := p.stale[slice]; ok && old == rv {
		return false
	}
	for i := range addrs {
		if addrs[i] != reported[i] {
			return false
		}
	}
	return true
}
