package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"sync"
	"time"

	"nodehub/filter"
	"nodehub/wire"
)

// topology keeps what the servicetopology filter needs: the openyurt.io/topologyKeys annotation
// of the Services that have one, and the nodes of this node's pool. It list/watches them through
// the hub's own proxy port, as any client would, so they are cached and answered from the cache
// offline. Memory holds only the annotated services and the pool's node names.
type topology struct {
	mu   sync.RWMutex
	keys map[string]string // namespace/name → topology key
	pool map[string]bool
	// fromNodePool is set once the pool came from a NodePool object.
	fromNodePool bool
	period       context.Context // ends at the next change: filtered watches end so clients re-list
	end          context.CancelFunc
}

func newTopology() *topology {
	t := &topology{keys: map[string]string{}}
	t.period, t.end = context.WithCancel(context.Background())
	return t
}

// TopologyKey implements filter.Topology.
func (t *topology) TopologyKey(ns, svc string) string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.keys[ns+"/"+svc]
}

// Any reports whether any service has a topology key (else servicetopology has nothing to do).
func (t *topology) Any() bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.keys) > 0
}

// PoolNodes implements filter.Topology.
func (t *topology) PoolNodes() map[string]bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.pool
}

func (t *topology) changes() context.Context {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.period
}

// bumpLocked ends the current period (mu held).
func (t *topology) bumpLocked() {
	t.end()
	t.period, t.end = context.WithCancel(context.Background())
}

func (t *topology) setService(ns, name, key string) {
	id := ns + "/" + name
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.keys[id] == key {
		return
	}
	if key == "" {
		delete(t.keys, id)
	} else {
		t.keys[id] = key
	}
	t.bumpLocked()
}

// setPoolFrom records the pool's nodes from the NodePool (fromNodePool) or from node labels;
// once a NodePool was seen, labels no longer count.
func (t *topology) setPoolFrom(fromNodePool bool, nodes map[string]bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !fromNodePool && t.fromNodePool {
		return
	}
	t.fromNodePool = t.fromNodePool || fromNodePool
	if maps.Equal(nodes, t.pool) {
		return
	}
	t.pool = nodes
	t.bumpLocked()
}

// runTopology keeps the topology current until ctx ends.
func (s *Server) runTopology(ctx context.Context, proxy string) {
	t := s.topo
	go s.informer(ctx, proxy, "/api/v1/services", "services", func(items [][]byte) {
		seen := map[string]bool{}
		for _, it := range items {
			ns, name, key := serviceKey(it)
			seen[ns+"/"+name] = true
			t.setService(ns, name, key)
		}
		t.mu.RLock()
		var gone []string
		for id := range t.keys {
			if !seen[id] {
				gone = append(gone, id)
			}
		}
		t.mu.RUnlock()
		for _, id := range gone {
			ns, name, _ := cutID(id)
			t.setService(ns, name, "")
		}
	}, func(ev wire.WatchEvent) {
		ns, name, key := serviceKey(ev.Object)
		if ev.Type == wire.EventDeleted {
			key = ""
		}
		t.setService(ns, name, key)
	})
	pool := s.cfg.NodePoolName
	if pool == "" {
		return // no pool: nodepool keys keep this node's endpoints only
	}
	// Both sources run: OpenYurt's NodePool (status.nodes) when that API exists, else the nodes
	// labelled with the pool. The NodePool wins once it has been seen.
	poolPath := "/apis/apps.openyurt.io/v1beta2/nodepools?fieldSelector=" + url.QueryEscape("metadata.name="+pool)
	go s.informer(ctx, proxy, poolPath, "nodepools", func(items [][]byte) {
		if len(items) > 0 {
			t.setPoolFrom(true, poolNodes(items[0]))
		}
	}, func(ev wire.WatchEvent) {
		if ev.Type == wire.EventAdded || ev.Type == wire.EventModified {
			t.setPoolFrom(true, poolNodes(ev.Object))
		}
	})
	nodes := map[string]bool{}
	var mu sync.Mutex
	nodePath := "/api/v1/nodes?labelSelector=" + url.QueryEscape("apps.openyurt.io/nodepool="+pool)
	go s.informer(ctx, proxy, nodePath, "nodes", func(items [][]byte) {
		mu.Lock()
		defer mu.Unlock()
		nodes = map[string]bool{}
		for _, it := range items {
			if m, err := wire.ExtractMeta(it, "nodes"); err == nil {
				nodes[m.Name] = true
			}
		}
		t.setPoolFrom(false, maps.Clone(nodes))
	}, func(ev wire.WatchEvent) {
		m, err := wire.ExtractMeta(ev.Object, "nodes")
		if err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		switch ev.Type {
		case wire.EventDeleted:
			if !nodes[m.Name] {
				return
			}
			delete(nodes, m.Name)
		case wire.EventAdded, wire.EventModified:
			if nodes[m.Name] {
				return // a status update of a member: the pool did not change
			}
			nodes[m.Name] = true
		default:
			return
		}
		t.setPoolFrom(false, maps.Clone(nodes))
	})
}

func cutID(id string) (string, string, bool) {
	for i := 0; i < len(id); i++ {
		if id[i] == '/' {
			return id[:i], id[i+1:], true
		}
	}
	return "", id, false
}

func serviceKey(raw []byte) (ns, name, key string) {
	om, err := wire.ObjectMeta(raw)
	if err != nil {
		return "", "", ""
	}
	return om.Namespace, om.Name, om.Annotations[filter.TopologyAnnotation]
}

func poolNodes(raw []byte) map[string]bool {
	var np struct {
		Status struct {
			Nodes []string `json:"nodes"`
		} `json:"status"`
	}
	if json.Unmarshal(raw, &np) != nil {
		return nil
	}
	out := map[string]bool{}
	for _, n := range np.Status.Nodes {
		out[n] = true
	}
	return out
}

func (s *Server) selfGet(ctx context.Context, proxy, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, proxy+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", wire.MediaJSON)
	req.Header.Set("User-Agent", "nodehub/topology")
	return s.self.Do(req)
}

// informer lists path and then watches it from the list's resourceVersion, again and again (with
// a back-off after failures) until ctx ends.
func (s *Server) informer(ctx context.Context, proxy, path, resource string, onList func([][]byte), onEvent func(wire.WatchEvent)) {
	backoff := time.Second
	sep := "?"
	if bytes.ContainsRune([]byte(path), '?') {
		sep = "&"
	}
	for ctx.Err() == nil {
		rv, err := s.listOnce(ctx, proxy, path, onList)
		if err == nil {
			err = s.watchOnce(ctx, proxy, path+sep+"watch=true&allowWatchBookmarks=true&resourceVersion="+url.QueryEscape(rv), onEvent)
			if err == nil {
				backoff = time.Second
				continue
			}
		}
		s.log.Debug("topology: "+resource+" list/watch", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

func (s *Server) listOnce(ctx context.Context, proxy, path string, onList func([][]byte)) (string, error) {
	resp, err := s.selfGet(ctx, proxy, path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("list %s: %s", path, resp.Status)
	}
	var items [][]byte
	var meta wire.ListMeta
	sp := wire.NewListSplitter(wire.MediaType{Type: wire.MediaJSON}, wire.ListHandler{
		Meta: func(m wire.ListMeta) { meta = m },
		Item: func(b []byte) error { items = append(items, b); return nil },
	})
	if _, err := io.Copy(writerFunc(sp.Write), resp.Body); err != nil {
		return "", err
	}
	if err := sp.Close(); err != nil {
		return "", err
	}
	onList(items)
	return meta.ResourceVersion, nil
}

func (s *Server) watchOnce(ctx context.Context, proxy, path string, onEvent func(wire.WatchEvent)) error {
	resp, err := s.selfGet(ctx, proxy, path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("watch %s: %s", path, resp.Status)
	}
	sp := wire.NewWatchSplitter(wire.MediaType{Type: wire.MediaJSON}, func(ev wire.WatchEvent) error {
		if ev.Type == wire.EventError {
			return fmt.Errorf("watch %s: error event", path)
		}
		onEvent(ev)
		return nil
	})
	_, err = io.Copy(writerFunc(sp.Write), resp.Body)
	return err // nil when the watch simply ended
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
