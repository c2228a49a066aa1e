package hub

import (
	"strconv"

	"nodehub/cache"
	"nodehub/hub/ota"
	"nodehub/hub/serve"
	"nodehub/wire"
)

// newOTA prepares YurtHub's hub API (GET /pods, upgrade, imagepull) on the hub port.
func (s *Server) newOTA() *ota.Handler {
	return &ota.Handler{
		NodeName:      s.cfg.NodeName,
		Cloud:         s.cloud(),
		Online:        s.state.Online,
		FromNode:      serve.FromLoopback,
		CachedPods:    s.cachedPods,
		StaticPodPath: s.cfg.StaticPodPath,
		Log:           s.log,
		OnAction:      func(action string, code int) { s.metrics.otaActions.Inc(action, strconv.Itoa(code)) },
	}
}

// cachedPods reads this node's pods from kubelet's cache, one file at a time.
func (s *Server) cachedPods(fn func([]byte) error) error {
	if s.cache == nil {
		return nil
	}
	sel, err := wire.NewSelector("", "", "spec.nodeName="+s.cfg.NodeName)
	if err != nil {
		return err
	}
	_, err = s.cache.Store.EachInList(cache.Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}, sel,
		func(it cache.Item) error { return fn(it.Body) })
	return err
}
