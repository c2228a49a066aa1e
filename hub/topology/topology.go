// Package topology is the hub's topology source: it keeps what the servicetopology filter needs,
// the openyurt.io/topologyKeys annotation of the Services that have one and the nodes of this
// node's pool, current by list and watch (listwatch) through the Fetch it is given. Memory holds
// only the annotated services and the pool's node names.
package topology

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"net/url"
	"strings"
	"sync"
	"time"

	"nodehub/filter"
	"nodehub/listwatch"
	"nodehub/wire"
)

// Source is the topology of this node: a filter.Topology, and the pool's members as OpenYurt's
// NodePool names them. Build it with New, keep it current with Run.
type Source struct {
	// Returned, if set (before Run), returns a channel closed when the cloud came back: the
	// informers end their back-off then (listwatch.Loop.Wake).
	Returned func() <-chan struct{}
	// Services, if set (before Run), offers the Services from a copy the hub already keeps
	// current (the pool's shared store): a Follow while there is one, else nil, and the services
	// are listed and watched through fetch. Asked again each time a Follow or a watch ends.
	Services func(ctx context.Context) Follow

	poolName string
	fetch    listwatch.Fetch
	log      *slog.Logger

	mu   sync.RWMutex
	keys map[string]string // namespace/name → topology key
	pool map[string]bool
	// fromNodePool is set once the pool came from a NodePool object.
	fromNodePool bool
	period       context.Context // ends at the next change: filtered watches end so clients re-list
	end          context.CancelFunc

	// listedServices: the services were listed; listedPool: the pool's nodes were (from the
	// NodePool or the nodes' labels), or both sources answered their first list, if with an error
	// (no NodePool API, no right to list nodes: the pool is then this node alone, which filters
	// more, never less). synced is closed once both hold.
	listedServices, listedPool bool
	poolTries                  int
	synced                     chan struct{}
}

// Follow hands list every Service (raw, JSON or protobuf) and then event each change, until ctx
// ends (nil) or it can no longer follow them (an error: the services are read again).
type Follow func(ctx context.Context, list func(items [][]byte), event func(wire.WatchEvent)) error

// New returns an empty topology for a node of pool poolName ("" for none) that Run reads through
// fetch: the hub gives it the cloud as the node, its answers cached and read back offline.
func New(poolName string, fetch listwatch.Fetch, log *slog.Logger) *Source {
	if log == nil {
		log = slog.Default()
	}
	t := &Source{poolName: poolName, fetch: fetch, log: log, keys: map[string]string{}, synced: make(chan struct{})}
	t.period, t.end = context.WithCancel(context.Background())
	return t
}

// Synced returns a channel closed once the topology was loaded (from the cloud or, offline, from
// the cache): the services were listed, and the pool's nodes when the node is in a pool. Until
// then a filter that used it would let every node's endpoints through.
func (t *Source) Synced() <-chan struct{} { return t.synced }

// listed records the first list of a source.
func (t *Source) listed(pool bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if pool {
		t.listedPool = true
	} else {
		t.listedServices = true
	}
	t.checkSyncedLocked()
}

// poolTried records that one of the pool's two sources answered its first list.
func (t *Source) poolTried() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.poolTries++; t.poolTries >= 2 {
		t.listedPool = true
	}
	t.checkSyncedLocked()
}

func (t *Source) checkSyncedLocked() {
	if t.listedServices && (t.listedPool || t.poolName == "") {
		select {
		case <-t.synced:
		default:
			close(t.synced)
		}
	}
}

// TopologyKey implements filter.Topology.
func (t *Source) TopologyKey(ns, svc string) string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.keys[ns+"/"+svc]
}

// Any reports whether any service has a topology key (else servicetopology has nothing to do).
func (t *Source) Any() bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.keys) > 0
}

// PoolNodes implements filter.Topology.
func (t *Source) PoolNodes() map[string]bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.pool
}

// NodePoolMembers returns the pool's nodes as OpenYurt's NodePool names them (ok false until a
// NodePool was seen: node labels, which a node may set on itself, do not count).
func (t *Source) NodePoolMembers() (map[string]bool, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.pool, t.fromNodePool
}

// Changes returns a context that ends at the next change of the topology: a watch whose answers
// were filtered with it ends then, so its client lists again and is filtered anew.
func (t *Source) Changes() context.Context {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.period
}

// bumpLocked ends the current period (mu held).
func (t *Source) bumpLocked() {
	t.end()
	t.period, t.end = context.WithCancel(context.Background())
}

func (t *Source) setService(ns, name, key string) {
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
func (t *Source) setPoolFrom(fromNodePool bool, nodes map[string]bool) {
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

// Run keeps the topology current until ctx ends, and returns when its informers have ended.
func (t *Source) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	inform := func(path, name string, tried func(), list func([][]byte), event func(wire.WatchEvent)) {
		shared := t.Services
		if name != "services" {
			shared = nil
		}
		wg.Go(func() { t.informer(ctx, path, name, shared, tried, list, event) })
	}
	inform("/api/v1/services", "services", nil, func(items [][]byte) {
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
			ns, name, _ := strings.Cut(id, "/")
			t.setService(ns, name, "")
		}
		t.listed(false)
	}, func(ev wire.WatchEvent) {
		ns, name, key := serviceKey(ev.Object)
		if ev.Type == wire.EventDeleted {
			key = ""
		}
		t.setService(ns, name, key)
	})
	pool := t.poolName
	if pool == "" {
		return // no pool: nodepool keys keep this node's endpoints only
	}
	// Both sources run: OpenYurt's NodePool (status.nodes) when that API exists, else the nodes
	// labelled with the pool. The NodePool wins once it has been seen.
	poolPath := "/apis/apps.openyurt.io/v1beta2/nodepools?fieldSelector=" + url.QueryEscape("metadata.name="+pool)
	inform(poolPath, "nodepools", t.poolTried, func(items [][]byte) {
		if len(items) > 0 {
			t.setPoolFrom(true, poolNodes(items[0]))
			t.listed(true)
		}
	}, func(ev wire.WatchEvent) {
		if ev.Type == wire.EventAdded || ev.Type == wire.EventModified {
			t.setPoolFrom(true, poolNodes(ev.Object))
		}
	})
	nodes := map[string]bool{}
	var mu sync.Mutex
	nodePath := "/api/v1/nodes?labelSelector=" + url.QueryEscape("apps.openyurt.io/nodepool="+pool)
	inform(nodePath, "nodes", t.poolTried, func(items [][]byte) {
		mu.Lock()
		defer mu.Unlock()
		nodes = map[string]bool{}
		for _, it := range items {
			if m, err := wire.ExtractMeta(it, "nodes"); err == nil {
				nodes[m.Name] = true
			}
		}
		t.setPoolFrom(false, maps.Clone(nodes))
		t.listed(true)
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

// informer lists path and then watches it from the list's resourceVersion, again and again (with
// a back-off after failures) until ctx ends: listwatch's loop. A watch that ends is resumed from
// the last resourceVersion it delivered (an event's or a bookmark's); only a 410 (or the first
// time) lists again, from the apiserver's watch cache — a hub coming back after an outage does
// not list every service again. tried, if set, is told once, when the first list ended, however.
// shared, if set, is asked first each time: a Follow it offers is followed instead (no request).
func (t *Source) informer(ctx context.Context, path, resource string, shared func(context.Context) Follow, tried func(), onList func([][]byte), onEvent func(wire.WatchEvent)) {
	fetch := t.fetch
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	rv := ""
	var once sync.Once
	listwatch.Loop{First: time.Second, Most: 30 * time.Second, Refused: time.Minute, Wake: t.Returned}.Run(ctx, func(ctx context.Context) (<-chan struct{}, error) {
		var err error
		if shared != nil {
			if follow := shared(ctx); follow != nil {
				rv = "" // back on fetch, it lists again: the followed copy's resourceVersion is not its
				err = follow(ctx, func(items [][]byte) {
					onList(items)
					if tried != nil {
						once.Do(tried)
					}
				}, onEvent)
				if err != nil {
					t.log.Debug("topology: "+resource+" from the shared store", "err", err)
				}
				return nil, err
			}
		}
		if rv == "" {
			var items [][]byte
			var meta wire.ListMeta
			meta, err = listwatch.List(ctx, fetch, path+sep+"resourceVersion=0", func(raw []byte) error { items = append(items, raw); return nil })
			if tried != nil && ctx.Err() == nil {
				once.Do(tried)
			}
			if err == nil {
				onList(items)
				rv = meta.ResourceVersion
			}
		}
		if err == nil {
			err = listwatch.Watch(ctx, fetch, path+sep+"watch=true&allowWatchBookmarks=true&resourceVersion="+url.QueryEscape(rv), 0, func(ev wire.WatchEvent) error {
				if ev.Type == wire.EventError {
					rv = "" // the apiserver's in-stream 410: list again
					return errors.New("error event")
				}
				if m, err := wire.ExtractMeta(ev.Object, resource); err == nil && m.ResourceVersion != "" {
					rv = m.ResourceVersion
				}
				if ev.Type != wire.EventBookmark {
					onEvent(ev)
				}
				return nil
			})
			if listwatch.IsGone(err) {
				rv = ""
			}
		}
		if err != nil {
			t.log.Debug("topology: "+resource+" list/watch", "err", err)
		}
		return nil, err
	})
}
