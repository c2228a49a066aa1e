package endpointfix

import (
	"bytes"
	"hash/maphash"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"nodehub/wire"
)

// view is one state of the corrections: the reports of the pods being corrected, this node's and
// those the pool's other hubs share for theirs. It never changes once made; a change makes a new
// one.
type view struct {
	gen  uint64
	node string
	pods map[string]Pod // by podID

	// same remembers the slices (by a hash of their bytes) this view left as they were, so they
	// are not decoded again at the next list or watch pass. Bounded: cleared when full.
	mu   sync.Mutex
	seed maphash.Seed
	same map[uint64]bool
}

// maxSame bounds a view's memory of unchanged slices.
const maxSame = 8192

// podID names a pod's report: its node's name, then namespace/name. A report applies only to
// endpoints on the node that reported it.
func podID(node, key string) string { return node + "|" + key }

// mentions is the cheap test on a slice's bytes: it names one of the pods (of pods, or of the
// view's when nil) and its node. Most slices fail it and are never decoded.
func (v *view) mentions(raw []byte, pods map[string]Pod) bool {
	if pods == nil {
		pods = v.pods
	}
	for _, p := range pods {
		if bytes.Contains(raw, []byte(p.Name)) && bytes.Contains(raw, []byte(p.Node)) {
			return true
		}
	}
	return false
}

// note is told, for each endpoint of this node's pods being corrected in a slice, whether the
// slice said something else (fixed) or already what kubelet reported.
type note func(slice, rv, pod string, fixed bool)

// reported returns the id and report of the pod an endpoint names (its nodeName and a Pod
// targetRef, in namespace ns when the ref names none), ok when that pod is being corrected. A ref
// whose UID is not the reported pod's names another pod of that name, one that does not run here:
// it gets a gone pod.
func (v *view) reported(node *string, ref *corev1.ObjectReference, ns, slice, rv string) (id string, p Pod, ok bool) {
	if node == nil || ref == nil || ref.Kind != "Pod" {
		return "", Pod{}, false
	}
	if ref.Namespace != "" {
		ns = ref.Namespace
	}
	id = podID(*node, ns+"/"+ref.Name)
	if p, ok = v.pods[id]; !ok || !p.applies(slice, rv) {
		return "", Pod{}, false
	}
	if ref.UID != "" && p.UID != "" && string(ref.UID) != p.UID {
		p = Pod{Gone: true}
	}
	return id, p, true
}

// fixSlice corrects a decoded slice: each endpoint whose targetRef is a Pod being corrected and
// whose nodeName is the node that reported it takes that report. Other endpoints are not touched.
func (v *view) fixSlice(s *discoveryv1.EndpointSlice, n note) bool {
	changed := false
	for i := range s.Endpoints {
		ep := &s.Endpoints[i]
		key := s.Namespace + "/" + s.Name
		id, p, ok := v.reported(ep.NodeName, ep.TargetRef, s.Namespace, key, s.ResourceVersion)
		if !ok {
			continue
		}
		fixed := !p.defers(key, s.ResourceVersion, ep.Addresses, p.addresses(s.AddressType)) && p.fix(ep, s.AddressType)
		changed = changed || fixed
		if n != nil {
			n(key, s.ResourceVersion, id, fixed)
		}
	}
	return changed
}

// apply returns a raw slice as served with the corrections: the very bytes when nothing changes
// (most slices are not even decoded), else the corrected slice encoded in the same format.
func (v *view) apply(raw []byte, n note) ([]byte, bool) {
	if !v.mentions(raw, nil) {
		return raw, false
	}
	v.mu.Lock()
	if v.same == nil {
		v.seed = maphash.MakeSeed()
		v.same = map[uint64]bool{}
	}
	seed := v.seed
	v.mu.Unlock()
	id := maphash.Bytes(seed, raw)
	v.mu.Lock()
	hit := v.same[id]
	v.mu.Unlock()
	if hit {
		return raw, false
	}
	out, changed := v.decodeAndFix(raw, n)
	if !changed {
		v.mu.Lock()
		if len(v.same) >= maxSame {
			clear(v.same)
		}
		v.same[id] = true
		v.mu.Unlock()
	}
	return out, changed
}

// decodeAndFix decodes a slice (or v1 Endpoints) that names a corrected pod and corrects it.
func (v *view) decodeAndFix(raw []byte, n note) ([]byte, bool) {
	t, err := wire.Decode(raw)
	if err != nil {
		return raw, false
	}
	switch obj := t.(type) {
	case *discoveryv1.EndpointSlice:
		if !v.fixSlice(obj, n) {
			return raw, false
		}
	case *corev1.Endpoints:
		if !v.fixEndpoints(obj, n) {
			return raw, false
		}
	default:
		return raw, false
	}
	out, err := wire.Encode(t, wire.IsProtobuf(raw))
	if err != nil {
		return raw, false
	}
	return out, true
}

// differing returns the pods whose reports differ between two views (in either).
func differing(old, cur *view) map[string]Pod {
	out := map[string]Pod{}
	for k, p := range cur.pods {
		if o, ok := old.pods[k]; !ok || !o.same(p) {
			out[k] = p
		}
	}
	for k, p := range old.pods {
		if _, ok := cur.pods[k]; !ok {
			out[k] = p
		}
	}
	return out
}
