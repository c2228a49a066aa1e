package endpointfix

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"nodehub/wire"
)

// Pod is what kubelet last reported of one pod of this node: what the EndpointSlice controller
// derives an endpoint from.
type Pod struct {
	Namespace, Name, UID string
	// Node is spec.nodeName.
	Node string
	// IPs are status.podIPs, as the controller writes them (parsed and printed again).
	IPs []string
	// Ready is the pod's Ready condition; Terminating, a deletionTimestamp; Terminal, phase
	// Failed or Succeeded.
	Ready, Terminating, Terminal bool
	// Gone: the pod is not in kubelet's pod list (or it is another pod of that name).
	Gone bool
	// Pending: a newer report of kubelet's is on its way to the cloud (sending.go); set in views
	// only.
	Pending bool `json:"-"`
	// stale: while Pending, the slices served corrected for the pod, by the resourceVersion
	// each had then (the cloud's word from before the write).
	stale map[string]string
	// floor: once the correction ended, the slices the cloud was seen agreeing in, by their
	// resourceVersion then: only older copies are still corrected (retired.go).
	floor map[string]string
}

// Key is namespace/name.
func (p Pod) Key() string { return p.Namespace + "/" + p.Name }

// PodOf reads a pod's report from its raw bytes (JSON or protobuf).
func PodOf(raw []byte) (Pod, error) {
	t, err := wire.Decode(raw)
	if err != nil {
		return Pod{}, err
	}
	pod, ok := t.(*corev1.Pod)
	if !ok {
		return Pod{}, fmt.Errorf("endpointfix: %T is not a Pod", t)
	}
	return FromPod(pod), nil
}

// FromPod is a pod's report.
func FromPod(pod *corev1.Pod) Pod {
	p := Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID), Node: pod.Spec.NodeName,
		Terminating: pod.DeletionTimestamp != nil,
		Terminal:    pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			p.Ready = c.Status == corev1.ConditionTrue
		}
	}
	ips := pod.Status.PodIPs
	if len(ips) == 0 && pod.Status.PodIP != "" {
		ips = []corev1.PodIP{{IP: pod.Status.PodIP}}
	}
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			p.IPs = append(p.IPs, a.Unmap().String())
		}
	}
	return p
}

// same reports whether two reports give the same endpoints.
func (p Pod) same(o Pod) bool {
	return p.UID == o.UID && slices.Equal(p.IPs, o.IPs) && p.Ready == o.Ready && p.Terminating == o.Terminating &&
		p.Terminal == o.Terminal && p.Gone == o.Gone && p.Pending == o.Pending && maps.Equal(p.floor, o.floor)
}

// addresses are the pod's IPs of a slice's address type, as the controller lists them
// (getEndpointAddresses); nil for FQDN slices.
func (p Pod) addresses(t discoveryv1.AddressType) []string {
	var out []string
	for _, s := range p.IPs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		if a.Is6() && t == discoveryv1.AddressTypeIPv6 || a.Is4() && t == discoveryv1.AddressTypeIPv4 {
			out = append(out, s)
		}
	}
	return out
}

// fix makes one endpoint say what the report says, as the EndpointSlice controller derives it
// (podToEndpoint): serving is the Ready condition, terminating the deletionTimestamp, ready is
// serving and not terminating unless the Service publishes not-ready addresses (which the
// endpoint shows: the controller wrote ready=true for a pod not serving or terminating); the
// addresses are podIPs of the slice's type. A pod kubelet reports failed or succeeded, or no
// longer runs, is not ready (the controller would drop it; its address stays, not ready, so the
// slice keeps its shape), and one without an address of the type keeps its old one, not ready.
// It reports whether the endpoint changed.
func (p Pod) fix(ep *discoveryv1.Endpoint, t discoveryv1.AddressType) bool {
	c := ep.Conditions
	publishNotReady := is(c.Ready) && (c.Serving != nil && !*c.Serving || is(c.Terminating))
	addrs := p.addresses(t)
	serving := p.Ready && !p.Terminal && !p.Gone
	terminating := p.Terminating
	if t == discoveryv1.AddressTypeFQDN {
		addrs = ep.Addresses
	}
	down := p.Terminal || p.Gone
	if len(addrs) == 0 {
		addrs, serving, down = ep.Addresses, false, true
	}
	ready := !down && (publishNotReady || serving && !terminating)
	changed := false
	if !slices.Equal(ep.Addresses, addrs) {
		ep.Addresses, changed = slices.Clone(addrs), true
	}
	changed = set(&ep.Conditions.Ready, ready) || changed
	changed = set(&ep.Conditions.Serving, serving) || changed
	if ep.Conditions.Terminating != nil || terminating { // absent reads as false
		changed = set(&ep.Conditions.Terminating, terminating) || changed
	}
	return changed
}

func is(b *bool) bool { return b != nil && *b }

// set makes *p say v and reports whether it changed.
func set(p **bool, v bool) bool {
	if *p != nil && **p == v {
		return false
	}
	v2 := v
	*p = &v2
	return true
}
