package endpointfix

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
)

// fixEndpoints corrects a decoded v1 Endpoints as the Endpoints controller derives it: an address
// of a reported pod takes the pod's IP of the same family as the address had
// (podToEndpointAddressForService), and sits in addresses when the pod is ready, else in
// notReadyAddresses — where a pod kubelet reports terminating, failed or succeeded, or does not
// run, also goes (the controller would drop it; its address stays, not ready). Other addresses are
// not touched. It reports whether anything changed.
func (v *view) fixEndpoints(e *corev1.Endpoints, n note) bool {
	changed := false
	for i := range e.Subsets {
		ss := &e.Subsets[i]
		var ready, notReady []corev1.EndpointAddress
		moved := false
		place := func(a corev1.EndpointAddress, wasReady bool) {
			id, p, ok := v.reported(a.NodeName, a.TargetRef, e.Namespace, e.Namespace+"/"+e.Name, e.ResourceVersion)
			if !ok {
				if wasReady {
					ready = append(ready, a)
				} else {
					notReady = append(notReady, a)
				}
				return
			}
			if p.defers(e.Namespace+"/"+e.Name, e.ResourceVersion, []string{a.IP}, []string{p.sameFamily(a.IP)}) {
				if wasReady {
					ready = append(ready, a)
				} else {
					notReady = append(notReady, a)
				}
				if n != nil {
					n(e.Namespace+"/"+e.Name, e.ResourceVersion, id, false)
				}
				return
			}
			fixed := false
			if ip := p.sameFamily(a.IP); ip != "" && ip != a.IP {
				a.IP, fixed = ip, true
			}
			isReady := p.Ready && !p.Terminating && !p.Terminal && !p.Gone && p.sameFamily(a.IP) != ""
			if isReady != wasReady {
				fixed, moved = true, true
			}
			if isReady {
				ready = append(ready, a)
			} else {
				notReady = append(notReady, a)
			}
			changed = changed || fixed
			if n != nil {
				n(e.Namespace+"/"+e.Name, e.ResourceVersion, id, fixed)
			}
		}
		for _, a := range ss.Addresses {
			place(a, true)
		}
		for _, a := range ss.NotReadyAddresses {
			place(a, false)
		}
		if moved || changed {
			ss.Addresses, ss.NotReadyAddresses = ready, notReady
		}
	}
	return changed
}

// sameFamily returns the pod's IP of the family of ip, or "".
func (p Pod) sameFamily(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ""
	}
	for _, s := range p.IPs {
		if b, err := netip.ParseAddr(s); err == nil && b.Is6() == a.Is6() {
			return s
		}
	}
	return ""
}
