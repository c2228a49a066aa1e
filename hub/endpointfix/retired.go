package endpointfix

import (
	"maps"
	"strconv"
)

// After the return, a pod's correction ends once the cloud's copy of it says what kubelet
// reported and every slice corrected for it was seen from the cloud saying the same. But the
// routes hold their own copies of a slice: a watch from the cloud may bring the controller's
// newer slice while the shared store still holds the one from before the outage (its watch of the
// cloud starts again a moment later). Ended outright, the correction left that older copy to be
// served as it is, dead addresses and all (issue 30: kube-proxy, watching the shared store, was
// sent web-0's dead address for a second after the return while CoreDNS's watch from the cloud
// had brought the new slice). So a pod whose correction ended stays corrected for the copies of
// each of its slices older than the one the cloud was seen agreeing in (its floor: that slice's
// resourceVersion), until the link is lost again, kubelet reports it again offline, or Bound.

// retireLocked drops an entry whose correction the cloud no longer needs (online, the cloud
// agrees and every slice corrected for it was seen right from the cloud), keeping its report for
// the older copies of those slices.
func (f *Fixer) retireLocked(k string, e *entry) bool {
	if !f.online || !e.cloudAgrees || len(e.slices) > 0 {
		return false
	}
	delete(f.entries, k)
	if len(e.agreed) > 0 && len(f.retired) < MaxPods {
		p := e.report
		p.floor = maps.Clone(e.agreed)
		f.retired[k] = p
	}
	return true
}

// olderThan reports whether resourceVersion rv is older than floor (both the apiserver's
// decimal numbers; anything else is not older).
func olderThan(rv, floor string) bool {
	a, err1 := strconv.ParseUint(rv, 10, 64)
	b, err2 := strconv.ParseUint(floor, 10, 64)
	return err1 == nil && err2 == nil && a < b
}

// applies reports whether a report applies to a copy of slice at resourceVersion rv: always,
// unless its correction ended, and then only to a copy older than the one the cloud agreed in.
func (p Pod) applies(slice, rv string) bool {
	if p.floor == nil {
		return true
	}
	f, ok := p.floor[slice]
	return ok && olderThan(rv, f)
}
