package local

import (
	"net/http"

	"nodehub/wire"
)

// Offline, a pod's status is kubelet's word alone: the copy it changes is what the hub's endpoint
// corrections (hub/endpointfix) take as kubelet's report, and a report steers every reader of the
// node's Services (and, in a pool, every node's). Only the node's kubelet — the node's identity
// (a request without a credential of its own, over loopback on the plain port) and kubelet's
// User-Agent — may report it; a credential of its own is never kubelet's, whatever its
// User-Agent. Any other caller's status write waits for the cloud, which judges it by its RBAC:
// 503, as every write the offline proxy cannot answer (a 403 would be a verdict on a permission
// the hub cannot check, and final for client-go).

// Kubelet reports whether the request is the node's kubelet: the node's identity, kubelet's
// User-Agent.
func (r *Request) Kubelet() bool { return r.Shared && r.Info.Component == "kubelet" }

// isPodStatus reports whether a request writes a pod's status.
func isPodStatus(ri *wire.RequestInfo) bool {
	return ri.Group == "" && ri.Resource == "pods" && ri.Subresource == "status"
}

// mayReport answers a pod status write of anyone but the node's kubelet with the refusal and says
// false.
func (p *Proxy) mayReport(w http.ResponseWriter, req *Request) bool {
	if !isPodStatus(req.Info) || req.Kubelet() {
		return true
	}
	p.status(w, req, http.StatusServiceUnavailable, "nodehub: the cloud is unreachable; only the node's kubelet may report pod status offline ("+req.Info.Verb+" pods/status with another credential or User-Agent waits for the cloud)")
	return false
}

// changeable is the request whose caches a write looks its object up in (and changes it there):
// kubelet's pod status write only in kubelet's own cache, where the hub finds its reports again
// at start; every other write in the request's caches.
func changeable(req *Request) *Request {
	if !isPodStatus(req.Info) {
		return req
	}
	return &Request{Info: req.Info, Own: req.Own, Shared: req.Shared, Vouched: req.Vouched, Owners: req.Owners[:1], Accept: req.Accept}
}
