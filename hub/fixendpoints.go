package hub

import (
	"context"

	"nodehub/cache"
	"nodehub/hub/endpointfix"
	"nodehub/pool"
	"nodehub/wire"
)

// The node's endpoints follow kubelet's reports while the cloud cannot hear them
// (hub/endpointfix). The hooks: kubelet's status writes applied offline (local.Proxy.Applied: the
// offline proxy applies a pod's status for the node's kubelet alone), the offline copies in
// kubelet's cache at start, and the pods its cached list lacks feed the Fixer, and nothing else
// does (the pool's notes carry only its reports); the cloud's answers to kubelet's status writes
// tell it the cloud caught up; every EndpointSlice answer goes through it — the cloud's and the
// shared stores' through the request's chain (chainFor), the cache's through
// local.Proxy.Revisions — and every open watch of slices sends what it changes as MODIFIED.

// newFixer sets up the corrections (with a cache: they need the node's cached pods).
func (s *Server) newFixer() {
	if s.local == nil || s.cfg.NodeName == "" {
		return
	}
	s.fix = endpointfix.New(s.cfg.NodeName, s.cfg.EndpointsReturnBound, s.log)
	s.local.Applied = s.fix.Applied
	s.local.Revisions = func(ri *wire.RequestInfo) pool.Revisions {
		if w := s.fix.CacheRevisions(ri); w != nil {
			return w
		}
		return nil
	}
	s.metrics.reg.NewGaugeFunc("nodehub_endpoints_corrected", "Endpoints of this node's pods served as kubelet reported them rather than as the cloud's EndpointSlices say (while the cloud cannot hear kubelet, and after its return until it caught up).",
		func() float64 { return float64(s.fix.Corrected()) })
	s.loadReports()
	if s.fix.Pods() > 0 {
		// The cache holds kubelet's offline writes: the hub stopped offline and most likely
		// starts so. Which pods kubelet does not run counts from the first answer too (they go
		// back to the cloud's word once it answers).
		s.findGone()
	}
}

// loadReports gives the Fixer the node's pods whose status kubelet wrote offline and the cloud
// has not replaced yet (the cache marks them local in kubelet's own cache, the one place the
// offline proxy applies them: hub/local's podstatus.go): a hub restarted offline corrects from
// its first answer.
func (s *Server) loadReports() {
	sel, _ := wire.NewSelector("", "", "")
	_, _ = s.cache.Store.EachInList(kubeletPods(), sel, func(it cache.Item) error {
		s.fix.Cached(it.Header.Local, it.Header.Fields["spec.nodeName"], it.Body)
		return nil
	})
	if n := s.fix.Pods(); n > 0 {
		s.log.Info("endpointfix: this node's endpoints follow kubelet's offline reports", "pods", n)
	}
}

// kubeletPods is kubelet's own cache of pods: the one source of its reports.
func kubeletPods() cache.Resource {
	return cache.Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}
}

// findGone shows the Fixer the cached EndpointSlices and kubelet's cached pods on this node (in
// its own cache), which decides which pods kubelet does not run (endpointfix.GoneFrom). Only when
// that list is whole: a pod missing from a partial one may well run.
func (s *Server) findGone() {
	store := s.cache.Store
	node := s.cfg.NodeName
	onNode, err := wire.NewSelector("", "", "spec.nodeName="+node)
	if err != nil {
		return
	}
	known := map[string]string{}
	res, err := store.EachInList(kubeletPods(), onNode, func(it cache.Item) error {
		known[it.Header.Namespace+"/"+it.Header.Name] = it.Header.UID
		return nil
	})
	if err != nil || res.Record == nil || res.Partial {
		return
	}
	all, _ := wire.NewSelector("", "", "")
	seen := map[string]bool{}
	for _, owner := range store.Owners() {
		r := cache.Resource{Owner: owner, Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}
		_, _ = store.EachInList(r, all, func(it cache.Item) error {
			if k := it.Header.Namespace + "/" + it.Header.Name; !seen[k] && s.fix.GoneFrom(it.Body, known) {
				seen[k] = true // one copy of a slice that names the node: the first owner's
			}
			return nil
		})
	}
}

// poolNotes is how the pool's other hubs' corrections reach the Fixer (nil without one): each
// hub shares its node's reports through the pool's leader (pool's notes, filed under the node
// its certificate names), and every hub corrects the endpoints on those nodes too.
func (s *Server) poolNotes() func(map[string][]byte) {
	if s.fix == nil {
		return nil
	}
	return s.fix.SetForeign
}

// shareReports publishes this node's reports to the pool whenever they change, until ctx ends.
func (s *Server) shareReports(ctx context.Context) {
	for {
		ch := s.fix.Changed()
		s.pool.Publish(s.fix.Shared())
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}
