// Package topology is the hub's topology source: it keeps what the servicetopology filter needs,
// the openyurt.io/topologyKeys annotation of the Services that have one and the nodes of this
// node's pool, current by list and watch (listwatch) through the Fetch it is given. Memory holds
// only the annotated services and the pool's node names.
package topology

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"net/url"
	"strings"
	"sync"

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

// Run keeps the topology current until ctx ends, and returns when its informers have ended: the
// services, and with a pool its nodes from the NodePool and from the nodes' labels.
func (t *Source) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	services := t.Services
	wg.Go(func() {
		t.informer(ctx, "/api/v1/services", "services", services, nil, t.listServices, t.serviceEvent)
	})
	pool := t.poolName
	if pool == "" {
		return // no pool: nodepool keys keep this node's endpoints only
	}
	// Both sources run: OpenYurt's NodePool (status.nodes) when that API exists, else the nodes
	// labelled with the pool. The NodePool wins once it has been seen.
	poolPath := "/apis/apps.openyurt.io/v1beta2/nodepools?fieldSelector=" + url.QueryEscape("metadata.name="+pool)
	wg.Go(func() {
		t.informer(ctx, poolPath, "nodepools", nil, t.poolTried, t.listNodePool, t.nodePoolEvent)
	})
	labelled := &labelledNodes{t: t, nodes: map[string]bool{}}
	nodePath := "/api/v1/nodes?labelSelector=" + url.QueryEscape("apps.openyurt.io/nodepool="+pool)
	wg.Go(func() {
		t.informer(ctx, nodePath, "nodes", nil, t.poolTried, labelled.list, labelled.event)
	})
}

// listServices records the listed services' keys and forgets those the list no longer holds.
func (t *Source) listServices(items [][]byte) {
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
}

// serviceEvent records a service's key as an event changed it.
func (t *Source) serviceEvent(ev wire.WatchEvent) {
	ns, name, key := serviceKey(ev.Object)
	if ev.Type == wire.EventDeleted {
		key = ""
	}
	t.setService(ns, name, key)
}

// listNodePool records the pool's nodes from the listed NodePool, if there is one.
func (t *Source) listNodePool(items [][]byte) {
	if len(items) > 0 {
		t.setPoolFrom(true, poolNodes(items[0]))
		t.listed(true)
	}
}

// nodePoolEvent records the pool's nodes from a NodePool that was added or changed.
func (t *Source) nodePoolEvent(ev wire.WatchEvent) {
	if ev.Type == wire.EventAdded || ev.Type == wire.EventModified {
		t.setPoolFrom(true, poolNodes(ev.Object))
	}
}

// labelledNodes are the nodes labelled with the pool, as their informer last saw them.
type labelledNodes struct {
	t     *Source
	mu    sync.Mutex
	nodes map[string]bool
}

// list records the listed nodes as the pool.
func (l *labelledNodes) list(items [][]byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nodes = map[string]bool{}
	for _, it := range items {
		if m, err := wire.ExtractMeta(it, "nodes"); err == nil {
			l.nodes[m.Name] = true
		}
	}
	l.t.setPoolFrom(false, maps.Clone(l.nodes))
	l.t.listed(true)
}

// event records a node that joined or left the pool; a member's status update changes nothing.
func (l *labelledNodes) event(ev wire.WatchEvent) {
	m, err := wire.ExtractMeta(ev.Object, "nodes")
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch ev.Type {
	case wire.EventDeleted:
		if !l.nodes[m.Name] {
			return
		}
		delete(l.nodes, m.Name)
	case wire.EventAdded, wire.EventModified:
		if l.nodes[m.Name] {
			return // a status update of a member: the pool did not change
		}
		l.nodes[m.Name] = true
	default:
		return
	}
	l.t.setPoolFrom(false, maps.Clone(l.nodes))
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
