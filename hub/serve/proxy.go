package serve

import (
	"context"
	"net/http"
	"strings"
	"time"

	"nodehub/filter"
	"nodehub/hub/identity"
	"nodehub/hub/local"
	"nodehub/hub/remote"
	"nodehub/pool"
	"nodehub/wire"
)

// ServeHTTP is the proxy ports' pipeline: every request a node client or a pod sends goes
// through these steps, in this order, and the one that answers it ends it. Its state is one
// proxyRequest (request.go).
//
//  1. accept    a request that did not arrive over loopback must bring a bearer token (401);
//     parse it (wire.ParseRequest; 400), count it in flight
//  2. admit     the in-flight budget of the node's clients or of everyone else (429), the
//     deadline on its body (limits.go)
//  3. identify  the credential it is forwarded with — the node's only for a request without its
//     own that came over loopback — and whose cache it reads and fills
//  4. route     the node's Lease from the hub's copy (hub/nodelease); kubelet's GET of its node
//     from the copy a live watch of it keeps, while fresh (nodecopy.go); a pool-scope list or watch
//     from the shared store (servePool); offline, or a cold read, from the cache (hub/local);
//     offline without a cache: 503; else to the cloud
//  5. chain     the filters its answer goes through (for the pool and the cloud routes; the
//     cache holds filtered answers); servicetopology's waits for the topology (503 past 10 s)
//  6. forward   to a healthy server through httputil.ReverseProxy and the balancer (forward.go);
//     on the cloud's answer, respond's steps (respond.go); without an answer, fallback: the
//     cache, the offline answer to a write, or 503
//  7. answer    streamed to the client, each watch event flushed at once
func (p *Pipeline) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := p.accept(w, r)
	if q == nil {
		return
	}
	defer p.end(q)
	if !p.admit(q) {
		return
	}
	p.identify(q)
	switch p.route(q) {
	case routeLease:
		p.Lease.ServeHTTP(q.w, q.r, q.ri)
	case routeNodeCopy:
		if !p.serveNodeCopy(q) {
			p.chainFor(q)
			p.forward(q)
		}
	case routePool:
		if p.chainFor(q) {
			p.servePool(q)
		}
	case routeLocal:
		p.serveLocal(q)
	case routeUnavailable:
		wire.WriteStatus(q.w, q.ri.Accept, http.StatusServiceUnavailable, "nodehub: no healthy cloud server")
	case routeCloud:
		if p.chainFor(q) {
			p.forward(q)
		}
	}
}

// ServeBearer admits a request on the secure port only with a bearer token, which is forwarded
// as is: pods act as their ServiceAccount there, never as the node.
func (p *Pipeline) ServeBearer(w http.ResponseWriter, r *http.Request) {
	if !hasBearer(r.Header.Get("Authorization")) {
		p.unauthorized(w, r, "secure", "nodehub: the secure port needs a bearer token (a ServiceAccount token); the node's identity is never lent here")
		return
	}
	p.ServeHTTP(w, r)
}

// accept is step 1: a request that arrived on any address but loopback — the dummy link's, where
// pods arrive, or any address of a port bound wider — must bring its own bearer token, which
// goes to the cloud as is; without one it gets 401 and never the node's identity, whatever its
// source address. nil when it was answered.
func (p *Pipeline) accept(w http.ResponseWriter, r *http.Request) *proxyRequest {
	from := originOf(r)
	if !from.loopback && !hasBearer(r.Header.Get("Authorization")) {
		p.unauthorized(w, r, "proxy", "nodehub: requests on this address must carry a bearer token (a ServiceAccount token); the node's identity is only lent over loopback")
		return nil
	}
	start := time.Now()
	ri, err := wire.ParseRequest(r)
	if err != nil {
		wire.WriteStatus(w, wire.NegotiateAccept(r.Header.Get("Accept")), http.StatusBadRequest, err.Error())
		return nil
	}
	q := &proxyRequest{w: &recorder{ResponseWriter: w}, r: r, ri: ri, start: start, from: from}
	q.ctx, q.cancel = context.WithCancel(r.Context())
	p.Metrics.Inflight(ri, 1)
	return q
}

// unauthorized answers 401 with a Status and counts it by port.
func (p *Pipeline) unauthorized(w http.ResponseWriter, r *http.Request, port, msg string) {
	p.Metrics.Unauthorized(port)
	closeUnread(w, r)
	w.Header().Set("WWW-Authenticate", `Bearer realm="nodehub"`)
	wire.WriteStatus(w, wire.NegotiateAccept(r.Header.Get("Accept")), http.StatusUnauthorized, msg)
}

// end is the last step of every accepted request: what the others set up is undone, and the
// request is counted with the status it got.
func (p *Pipeline) end(q *proxyRequest) {
	for i := len(q.cleanup) - 1; i >= 0; i-- {
		q.cleanup[i]()
	}
	q.cancel()
	p.Metrics.Inflight(q.ri, -1)
	p.Metrics.Request(q.ri, q.w.code(), time.Since(q.start))
}

// admit is step 2: past MaxInFlight short requests of its budget a request gets 429 with
// Retry-After (watches and real upgrades do not count; the node's own clients and everyone else
// have a budget each, so pods cannot starve kubelet); a body gets its deadline.
func (p *Pipeline) admit(q *proxyRequest) bool {
	r, ri := q.r, q.ri
	if max := int64(p.MaxInFlight); max > 0 && ri.Verb != wire.VerbWatch && !isUpgrade(r, ri) {
		budget, who := &p.inflightOthers, "others"
		if q.from.node {
			budget, who = &p.inflightNode, "node"
		}
		n := budget.Add(1)
		q.onEnd(func() { budget.Add(-1) })
		if n > max {
			p.Metrics.Throttled(who)
			closeUnread(q.w, r)
			q.w.Header().Set("Retry-After", "1")
			wire.WriteStatus(q.w, ri.Accept, http.StatusTooManyRequests, "nodehub: too many requests in flight; try again")
			return false
		}
	}
	q.body = p.limitBody(q.w.ResponseWriter, r, ri)
	return true
}

// identify is step 3: the identity the request is forwarded with, and (with a cache) whose cache
// it reads and fills.
func (p *Pipeline) identify(q *proxyRequest) {
	q.id = q.from.identity()
	if p.Local != nil {
		var own string
		own, q.cred = p.cacheOwner(q.ri, q.r, q.id)
		node := q.id == remote.Node
		q.local = &local.Request{Info: q.ri, Own: own, Shared: node, Vouched: node || p.IDs.Vouched(q.cred)}
	}
}

// cacheOwner names whose cache a request reads and its response goes to: the component for
// requests made with the node's identity; for requests that brought their own credential, one of
// that credential's (identity.Table.Owner), so nothing cached for one identity is read back for
// another.
func (p *Pipeline) cacheOwner(ri *wire.RequestInfo, r *http.Request, id remote.Identity) (string, identity.Credential) {
	comp := ownerComponent(ri)
	if id == remote.Node {
		return comp, identity.Credential{}
	}
	return p.IDs.Owner(comp, r.Header.Get("Authorization"))
}

// ownerComponent is the component part of a cache owner's name. "@" separates a component from a
// credential there: a User-Agent may not carry one, or a local client could name a pod's cache as
// its own.
func ownerComponent(ri *wire.RequestInfo) string { return strings.ReplaceAll(ri.Component, "@", "_") }

// route is where a request is answered (step 4).
type route int

const (
	routeLease       route = iota // the node's Lease, from the hub's copy
	routeNodeCopy                 // kubelet's GET of its node, from the copy a live watch keeps (nodecopy.go)
	routePool                     // a pool-scope list or watch, from the shared store
	routeLocal                    // from the cache: offline, or a cold read
	routeUnavailable              // offline without a cache
	routeCloud                    // forwarded to a healthy cloud server
)

// route is step 4. The node's Lease and the shared stores answer the node's own clients online
// or not; the cloud's state decides the rest.
func (p *Pipeline) route(q *proxyRequest) route {
	if q.id == remote.Node && !cborOnly(q.ri, q.r) { // CBOR alone: the cloud's answer or 406 (cbor.go)
		if p.Lease.Owns(q.ri) {
			return routeLease
		}
		if p.isOwnNodeGet(q.ri) && p.node.fresh(time.Now(), p.Cloud.Online()) != nil {
			return routeNodeCopy
		}
		if q.store = p.Pool.Store(q.ri); q.store != nil {
			return routePool
		}
	}
	st := p.Cloud.Current()
	switch {
	case q.local != nil && (st == remote.Unhealthy || st == remote.Unknown && p.coldRead(q.r, q.local)):
		return routeLocal
	case q.local == nil && st == remote.Unhealthy:
		return routeUnavailable
	}
	return routeCloud
}

// coldRead reports whether a request made before the first probe's verdict is a read the cache
// answers: it waits a moment for the verdict (see Cloud.Settle), then is served from the
// cache unless the cloud turned out reachable. Writes and what the cache cannot answer go to the
// cloud.
func (p *Pipeline) coldRead(r *http.Request, lreq *local.Request) bool {
	v := lreq.Info.Verb
	read := v == wire.VerbGet || v == wire.VerbList || v == wire.VerbWatch && lreq.Info.SendInitialEvents // a watch-list is a list
	if !read || !p.Local.CanAnswer(r, lreq) {
		return false
	}
	return p.Cloud.Settle(r.Context()) != remote.Healthy
}

// FilterAsProxied runs the cloud's answer to a request of the hub's own through the filters the
// proxy's answer to ri goes through, counted in /metrics: the re-list of kubelet's pods
// (relistNodePods), filtered as the proxy's.
func (p *Pipeline) FilterAsProxied(ri *wire.RequestInfo, resp *http.Response) {
	if chain := p.counted(p.Filters.For(ri)); chain != nil && resp.StatusCode == http.StatusOK {
		p.filter(chain, ri, resp)
	}
}

// counted has c's filter errors and actions counted in /metrics.
func (p *Pipeline) counted(c *filter.Chain) *filter.Chain {
	if c == nil {
		return nil
	}
	c.OnError = func(name string) { p.Metrics.FilterError(name) }
	c.OnChange = func(name string, v filter.Verdict) {
		action := "changed"
		if v == filter.Drop {
			action = "removed"
		}
		p.Metrics.FilterAction(name, action)
	}
	return c
}

// serveLocal answers a request from the cache (routeLocal).
func (p *Pipeline) serveLocal(q *proxyRequest) {
	p.Metrics.Offline(q.ri.Verb)
	p.Local.ServeHTTP(q.w, q.r, q.local)
}

// servePool answers a local client's list or watch of a pool-scope resource from the shared
// store (routePool), each object through the request's filter chain.
func (p *Pipeline) servePool(q *proxyRequest) {
	ri := q.ri
	sv := pool.Serving{Info: ri}
	if w := p.Fix.StoreRevisions(ri); w != nil {
		sv.Revisions = w
	}
	if chain := q.chain; chain != nil {
		sv.Transform = func(raw []byte) ([]byte, bool) {
			out, v := chain.Apply(raw)
			return out, v == filter.Drop
		}
	}
	p.Metrics.PoolServed(ri.Verb, ri.Resource)
	if ri.Verb == wire.VerbWatch {
		p.Metrics.PoolWatches(1)
		defer p.Metrics.PoolWatches(-1)
		q.store.ServeWatch(q.w, q.r.WithContext(q.ctx), sv)
		return
	}
	q.store.ServeList(q.w, sv)
}

// chainFor is step 5, the one place a request's filters are chosen: the chain for its
// component, resource and verb (nil when no filter applies), counted in /metrics. A watch whose
// chain uses servicetopology ends when the topology changes: the client re-lists and gets
// re-filtered slices. A chain using servicetopology waits for the topology to be loaded (up to
// topologyWait; then 503 with Retry-After): an answer filtered with an empty topology would hold
// every node's endpoints. false when the request was answered.
func (p *Pipeline) chainFor(q *proxyRequest) bool {
	q.chain = p.counted(p.Fix.Chain(p.Filters.For(q.ri), q.ri, q.store != nil))
	if q.chain == nil {
		return true
	}
	if cborOnly(q.ri, q.r) {
		wire.WriteStatus(q.w, q.ri.Accept, http.StatusNotAcceptable, "nodehub: this answer goes through the hub's filters, which read JSON and protobuf, not CBOR: accept application/json")
		return false
	}
	if q.chain.Uses("servicetopology") && !p.waitTopology(q.ctx) {
		q.w.Header().Set("Retry-After", "1")
		wire.WriteStatus(q.w, q.ri.Accept, http.StatusServiceUnavailable, "nodehub: the topology the servicetopology filter needs is not loaded yet")
		return false
	}
	if q.ri.Verb == wire.VerbWatch && q.chain.Uses("servicetopology") {
		stop := context.AfterFunc(p.Topo.Changes(), q.cancel)
		q.onEnd(func() { stop() })
	}
	return true
}

// topologyWait is how long a request whose answer the servicetopology filter rewrites waits for
// the topology's first load.
const topologyWait = 10 * time.Second

// waitTopology waits until the topology is loaded, topologyWait at most (or ctx ends).
func (p *Pipeline) waitTopology(ctx context.Context) bool {
	select {
	case <-p.Topo.Synced():
		return true
	default:
	}
	t := time.NewTimer(topologyWait)
	defer t.Stop()
	select {
	case <-p.Topo.Synced():
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}
