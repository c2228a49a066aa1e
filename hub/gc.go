package hub

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"

	"nodehub/hub/serve"
	"nodehub/wire"
)

// unusedCacheAge is how long a component's cache may go unwritten (with the cloud reachable)
// before it is dropped.
const unusedCacheAge = 7 * 24 * time.Hour

// runGC collects the cache: once, as soon as the cloud is reachable, kubelet's pods of this node
// are re-listed so pods deleted while the hub was down leave the cache; every GCFrequency old
// events are removed (offline too: offline creates are what piles up then) and, while the cloud
// is reachable, unused components' caches. It returns when ctx ends and the re-list has ended.
func (s *Server) runGC(ctx context.Context) {
	reached := make(chan struct{})
	var relist sync.WaitGroup
	defer relist.Wait()
	relist.Go(func() {
		if !s.waitReached(ctx) {
			return
		}
		if err := s.relistNodePods(ctx); err != nil {
			s.log.Warn("cache gc: re-list of this node's pods failed", "err", err)
		} else {
			s.log.Info("cache gc: this node's pods re-listed") // once per start
		}
		close(reached)
	})
	t := time.NewTicker(s.cfg.GCFrequency)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		for _, res := range []string{"events"} {
			if n, err := s.cache.Store.RemoveOlder(res, s.cfg.GCFrequency, now); err != nil || n > 0 {
				s.log.Info("cache gc: removed old events", "count", n, "err", err)
			}
		}
		select {
		case <-reached:
		default:
			continue
		}
		if !s.state.Online() {
			continue // offline: the cache is all the node has
		}
		if gone, err := s.cache.Store.AgeOut(unusedCacheAge, now); err != nil || len(gone) > 0 {
			s.log.Info("cache gc: dropped unused caches", "components", gone, "err", err)
		}
	}
}

func (s *Server) waitReached(ctx context.Context) bool {
	for !s.state.answeredOnce() {
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
	return true
}

// relistNodePods lists this node's pods from the cloud as kubelet does and keeps the answer in
// kubelet's cache as the proxy would have (its filter chain, then keep), whose reconcile removes
// the pods the cloud no longer has.
func (s *Server) relistNodePods(ctx context.Context) error {
	url := "/api/v1/pods?fieldSelector=spec.nodeName%3D" + s.cfg.NodeName
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", wire.MediaProtobuf+", "+wire.MediaJSON)
	req.Header.Set("User-Agent", "kubelet/nodehub-gc")
	ri, err := wire.ParseRequest(req)
	if err != nil {
		return err
	}
	resp, err := s.cloud().RoundTrip(req)
	if err != nil {
		return err
	}
	s.pipe.FilterAsProxied(ri, resp)
	serve.Keep(s.cache, ri, "kubelet", resp)
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return err
}
