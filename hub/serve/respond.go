package serve

import (
	"errors"
	"net/http"

	"nodehub/hub/remote"
	"nodehub/wire"
)

// respond is step 6 on the cloud's answer (ReverseProxy.ModifyResponse), before any byte of it
// reaches the client. Its steps are the calls below, in their order; each does nothing to an
// answer it is not for. (docs/ARCHITECTURE.md and ServeHTTP's list point here.)
func (p *Pipeline) respond(resp *http.Response) error {
	q := requestOf(resp.Request.Context())
	if q == nil || resp.StatusCode == http.StatusSwitchingProtocols {
		return nil
	}
	if err := p.refuse(q, resp); err != nil {
		return err // fallback answers from the cache instead
	}
	p.count(q, resp)        // the bytes, as they stream
	gunzipWatch(q.ri, resp) // a gzip watch made plain (gunzip.go)
	p.recordToken(q, resp)  // a token request's answer kept (keeptoken.go)
	p.filterAnswer(q, resp) // the request's chain (filter.go)
	p.copyNode(q, resp)     // the node's copy (nodecopy.go)
	p.setAutonomy(q, resp)  // kubelet's node gets the Autonomy condition
	p.fixAnswer(q, resp)    // kubelet's report reached the cloud (fixanswer.go)
	p.keep(q, resp)         // teed into its owner's cache (keep.go)
	return nil
}

// errNotAPI marks a 5xx answer that is not the apiserver's own (a load balancer in front of it):
// for a read, the cache answers instead.
var errNotAPI = errors.New("nodehub: the cloud answered with a 5xx that is not an API Status")

// errThrottled: the apiserver answered a read 429 Too Many Requests; the cache answers it instead
// of sending the client back to retry against an apiserver that asked for less.
var errThrottled = errors.New("nodehub: the cloud answered 429 Too Many Requests")

// refuse turns an answer the cache answers better into an error for fallback: a read's 5xx that
// is not the apiserver's own, a read the apiserver sheds (429) that the cache can answer.
func (p *Pipeline) refuse(q *proxyRequest, resp *http.Response) error {
	ri := q.ri
	if q.local == nil || ri.Verb != wire.VerbGet && ri.Verb != wire.VerbList {
		return nil
	}
	if resp.StatusCode >= 500 && !isAPIStatus(resp) {
		return errNotAPI
	}
	if resp.StatusCode == http.StatusTooManyRequests && p.Local.CanAnswer(q.r, q.local) {
		return errThrottled // the apiserver sheds load: the cache answers meanwhile
	}
	return nil
}

// isAPIStatus reports whether an error answer comes from the apiserver (a Status in JSON or
// protobuf) rather than from something in front of it.
func isAPIStatus(resp *http.Response) bool {
	t := wire.ParseMediaType(resp.Header.Get("Content-Type")).Type
	return t == wire.MediaJSON || t == wire.MediaProtobuf
}

// count counts the answer's bytes as they stream, and the request's body's (purpose proxied).
func (p *Pipeline) count(q *proxyRequest, resp *http.Response) {
	resp.Body = &wire.CountingBody{ReadCloser: resp.Body, Count: p.Metrics.CloudBytes(q.ri)}
	if req := resp.Request; req != nil && req.ContentLength > 0 {
		p.Metrics.Purpose("proxied", "sent")(int(req.ContentLength))
	}
}

// filterAnswer runs a 200 answer through the request's chain, if it has one.
func (p *Pipeline) filterAnswer(q *proxyRequest, resp *http.Response) {
	if q.chain != nil && resp.StatusCode == http.StatusOK {
		p.filter(q.chain, q.ri, resp)
	}
}

// copyNode gives the node's copy the cloud's own bytes of kubelet's GET of its node and of a
// watch of it (unfiltered, with the node's identity), before the condition is set.
func (p *Pipeline) copyNode(q *proxyRequest, resp *http.Response) {
	if q.id != remote.Node || q.chain != nil {
		return
	}
	switch {
	case p.isOwnNodeGet(q.ri):
		p.node.fromGet(resp)
	case p.isOwnNodeWatch(q.ri):
		p.node.track(resp)
	}
}

// setAutonomy sets the Autonomy condition in kubelet's GET of its node and each event of a watch
// of it (kubelet's informer: v1.37 reads its node there). Before the cache: it keeps what kubelet
// received. After the node copy: it keeps the cloud's bytes.
func (p *Pipeline) setAutonomy(q *proxyRequest, resp *http.Response) {
	if p.Auto == nil || q.local == nil || q.id != remote.Node {
		return
	}
	switch {
	case p.isOwnNodeGet(q.ri):
		p.Auto.Response(resp)
	case p.isOwnNodeWatch(q.ri):
		p.Auto.WatchResponse(resp, p.NodeName)
	}
}

// keepWhole bounds the get answers keep reads whole before the tee: one small object, whose
// announced length arrives in a read or two (a node, a pod, a lease).
const keepWhole = 64 << 10

// keep tees the answer into its owner's cache (Keep; nothing without a cache). A get's answer of a
// small announced length is read whole first (wire.ReadWhole): the cache then tells from its
// resourceVersion that it holds it already and skips the tee, or keeps its bytes without a copy.
func (p *Pipeline) keep(q *proxyRequest, resp *http.Response) {
	if q.local == nil {
		return
	}
	if q.ri.Verb == wire.VerbGet && q.ri.IsResource && resp.StatusCode == http.StatusOK && resp.Header.Get("Content-Encoding") == "" &&
		resp.ContentLength > 0 && resp.ContentLength <= keepWhole {
		wire.ReadWhole(resp, keepWhole)
	}
	Keep(p.Cache, q.ri, p.learn(q, resp), resp)
}

// learn returns the owner a cloud answer is cached for: the request's own credential's
// (hub/identity), once the server that answered said who a bearer token the hub did not know is
// (a resource's 2xx asks it, review.go): a ServiceAccount's token reads and writes that
// ServiceAccount's cache from then on. An answer's status alone vouches for no one.
func (p *Pipeline) learn(q *proxyRequest, resp *http.Response) string {
	if q.cred.Hash == "" {
		return q.local.Own // the node's identity, or no credential
	}
	if resp.StatusCode/100 == 2 && q.ri.IsResource && q.cred.Bearer && !p.IDs.Vouched(q.cred) {
		p.IDs.Learn(q.ctx, q.cred, p.askWho(resp.Request))
	}
	return p.IDs.OwnerOf(ownerComponent(q.ri), q.cred)
}
