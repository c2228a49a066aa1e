package endpointfix

import (
	"slices"

	"nodehub/filter"
	"nodehub/wire"
)

// The hub's calls: which of its requests and answers the corrections take part in is decided
// here, and the hub only calls (its request pipeline, hub/serve, and its feeding,
// hub/fixendpoints.go). A nil Fixer (no cache) corrects nothing.

// IsSlices reports whether a request is of what the Fixer corrects: EndpointSlices or v1
// Endpoints.
func IsSlices(ri *wire.RequestInfo) bool {
	return ri.IsResource && ri.Subresource == "" &&
		(ri.Group == "discovery.k8s.io" && ri.Resource == "endpointslices" || ri.Group == "" && ri.Resource == "endpoints")
}

// IsPodStatus reports whether a request is a write of a pod's status (kubelet's reports).
func IsPodStatus(ri *wire.RequestInfo) bool {
	return ri.IsResource && ri.Group == "" && ri.Resource == "pods" && ri.Subresource == "status"
}

// Chain adds the corrections to a request's chain (every client's reads of EndpointSlices):
// always for the shared stores (shared), whose watches outlive an outage; for the cloud only
// while some endpoint is corrected (a chain makes a list answer be read whole before it is sent).
func (f *Fixer) Chain(c *filter.Chain, ri *wire.RequestInfo, shared bool) *filter.Chain {
	if f == nil || !shared && !f.Active() || !reads(ri) {
		return c
	}
	return filter.Prepend(c, ri.Resource, f.Filter())
}

// reads reports whether a request is a get, list or watch of whole objects the Fixer corrects
// (not a subresource, not a partial object).
func reads(ri *wire.RequestInfo) bool {
	if !ri.IsResource || ri.Subresource != "" || ri.Accept.As != "" {
		return false
	}
	return (ri.Verb == wire.VerbGet || ri.Verb == wire.VerbList || ri.Verb == wire.VerbWatch) && slices.Contains(Resources, ri.GVR())
}

// CacheRevisions are the corrections of the cache's answer to a request of slices (hub/local's
// Revisions: a get or list served corrected, a watch sends what they change), nil for any other.
func (f *Fixer) CacheRevisions(ri *wire.RequestInfo) *Watch {
	if f == nil || !IsSlices(ri) {
		return nil
	}
	return f.NewWatch()
}

// StoreRevisions are the corrections a shared store's watch of slices sends as they change (its
// objects pass the request's chain, Chain), nil for any other request.
func (f *Fixer) StoreRevisions(ri *wire.RequestInfo) *Watch {
	if ri.Verb != wire.VerbWatch {
		return nil
	}
	return f.CacheRevisions(ri)
}

// Applied takes a write the offline proxy applied: a pod's status is kubelet's report (hub/local
// applies one for the node's kubelet alone).
func (f *Fixer) Applied(ri *wire.RequestInfo, obj []byte) {
	if f != nil && IsPodStatus(ri) {
		f.Reported(obj)
	}
}

// Cached takes a pod of kubelet's cache at start (the hub reads it: hub/fixendpoints.go): the
// offline proxy's copy (local: kubelet's status write the cloud has not replaced yet) of a pod on
// this node is kubelet's report.
func (f *Fixer) Cached(local bool, node string, raw []byte) {
	if local && node == f.node {
		f.Reported(raw)
	}
}

// kubeletsReport reports whether a forwarded request is kubelet's status write of a pod (with the
// node's identity) while something is corrected.
func (f *Fixer) kubeletsReport(ri *wire.RequestInfo, asNode bool) bool {
	return f != nil && f.Active() && asNode && ri.Component == "kubelet" && IsPodStatus(ri) &&
		(ri.Verb == wire.VerbPatch || ri.Verb == wire.VerbUpdate)
}

// SendingWrite is called as kubelet's status write of a pod leaves for the cloud: the returned
// done (nil: nothing to do) ends its sending (the cloud's slice saying what it says may arrive
// before the answer does: sending.go).
func (f *Fixer) SendingWrite(ri *wire.RequestInfo, asNode bool) (done func()) {
	if !f.kubeletsReport(ri, asNode) {
		return nil
	}
	return f.Sending(ri.Namespace, ri.Name)
}

// WantsAnswer reports whether the Fixer reads the cloud's answer to this write (code, its
// Content-Encoding): kubelet's status write of a pod it corrects, answered 2xx, not encoded. The
// pipeline hands that answer, whole, to ReportedOnline as it streams to kubelet: the cloud has
// kubelet's report now. Nothing is read when nothing is corrected.
func (f *Fixer) WantsAnswer(ri *wire.RequestInfo, asNode bool, code int, encoding string) bool {
	return f.kubeletsReport(ri, asNode) && code/100 == 2 && encoding == ""
}
