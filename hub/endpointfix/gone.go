package endpointfix

import (
	"bytes"

	discoveryv1 "k8s.io/api/discovery/v1"

	"nodehub/wire"
)

// GoneFrom takes a slice as the cache holds it at start: every pod it places on this node that
// known (kubelet's cached pods on this node, whole: namespace/name → uid) lacks, or holds as
// another pod, is Gone (kubelet does not run it: not ready). The hub reads the cache for it
// (hub/fixendpoints.go). It reports whether the slice names this node at all (its bytes do).
func (f *Fixer) GoneFrom(raw []byte, known map[string]string) bool {
	if !bytes.Contains(raw, []byte(f.node)) {
		return false
	}
	t, err := wire.Decode(raw)
	if err != nil {
		return true
	}
	sl, ok := t.(*discoveryv1.EndpointSlice)
	if !ok {
		return true
	}
	for _, e := range sl.Endpoints {
		ref := e.TargetRef
		if e.NodeName == nil || *e.NodeName != f.node || ref == nil || ref.Kind != "Pod" {
			continue
		}
		ns := ref.Namespace
		if ns == "" {
			ns = sl.Namespace
		}
		if uid, ok := known[ns+"/"+ref.Name]; !ok || ref.UID != "" && uid != "" && uid != string(ref.UID) {
			f.Gone(ns, ref.Name, string(ref.UID))
		}
	}
	return true
}
