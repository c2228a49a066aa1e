package endpointfix

import (
	"bytes"

	discoveryv1 "k8s.io/api/discovery/v1"

	"nodehub/wire"
)

// view is one state of the corrections: the reports of the pods being corrected. It never
// changes once made; a change makes a new one.
type view struct {
	gen  uint64
	node string
	pods map[string]Pod // by namespace/name
}

var emptyView = &view{}

// mentions is the cheap test on a slice's bytes: it names this node and one of the pods (of
// pods, or of the view's when nil). Most slices fail it and are never decoded.
func (v *view) mentions(raw []byte, pods map[string]Pod) bool {
	if pods == nil {
		pods = v.pods
	}
	if len(pods) == 0 || v.node == "" || !bytes.Contains(raw, []byte(v.node)) {
		return false
	}
	for _, p := range pods {
		if bytes.Contains(raw, []byte(p.Name)) {
			return true
		}
	}
	return false
}

// note is told, for each endpoint of this node's pods being corrected in a slice, whether the
// slice said something else (fixed) or already what kubelet reported.
type note func(slice, pod string, fixed bool)

// fixSlice corrects a decoded slice: each endpoint whose nodeName is this node and whose
// targetRef is a Pod being corrected takes that pod's report. Other endpoints are not touched.
func (v *view) fixSlice(s *discoveryv1.EndpointSlice, n note) bool {
	changed := false
	for i := range s.Endpoints {
		ep := &s.Endpoints[i]
		ref := ep.TargetRef
		if ep.NodeName == nil || *ep.NodeName != v.node || ref == nil || ref.Kind != "Pod" {
			continue
		}
		ns := ref.Namespace
		if ns == "" {
			ns = s.Namespace
		}
		p, ok := v.pods[ns+"/"+ref.Name]
		if !ok {
			continue
		}
		if ref.UID != "" && p.UID != "" && string(ref.UID) != p.UID {
			p = Pod{Gone: true} // another pod of that name: the one the slice names does not run here
		}
		fixed := p.fix(ep, s.AddressType)
		changed = changed || fixed
		if n != nil {
			n(s.Namespace+"/"+s.Name, ns+"/"+ref.Name, fixed)
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
	t, err := wire.Decode(raw)
	if err != nil {
		return raw, false
	}
	s, ok := t.(*discoveryv1.EndpointSlice)
	if !ok || !v.fixSlice(s, n) {
		return raw, false
	}
	out, err := wire.Encode(s, bytes.HasPrefix(raw, []byte("k8s\x00")))
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
