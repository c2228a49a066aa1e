package hub

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"nodehub/cache"
	"nodehub/hub/local"
	"nodehub/hub/remote"
	"nodehub/hub/serve"
	"nodehub/listwatch"
	"nodehub/wire"
)

// cloudClient is the hub's one way of reaching the cloud as the node for its own requests (pool
// sharing, OTA, GC, the topology source): an http.RoundTripper whose requests carry only a path
// and query ("/api/v1/pods?..."); a healthy server chosen by the balancer answers, with the node's
// identity, over its HTTP/2 connection. The node lease's heartbeat is the exception: it
// goes to each server through that server's own Backend.
type cloudClient struct {
	balancer *remote.Balancer
	metrics  *hubMetrics
}

// RoundTrip implements http.RoundTripper. Every request goes over the server's HTTP/2
// connection, the one the hub's watches keep open: the hub's own short requests are sporadic (an
// election's list, a refused list tried again, the autonomy condition), and over HTTP/1.1 each
// would find its keep-alive connection gone (90 s idle) and pay a TLS handshake, ~2 KB from the
// cloud, for an answer of a few hundred bytes.
func (c cloudClient) RoundTrip(req *http.Request) (*http.Response, error) {
	purpose := "own"
	if req.Header.Get("User-Agent") == "nodehub/pool" {
		purpose = "pool"
	}
	return countPurpose(c.metrics, purpose, req)(c.balancer.Send(remote.Route{Identity: remote.Node, Stream: true}, req))
}

// countPurpose counts a request's body and its answer's as purpose (nodehub_cloud_bytes_total).
func countPurpose(m *hubMetrics, purpose string, req *http.Request) func(*http.Response, error) (*http.Response, error) {
	if m == nil {
		return serve.CountPurpose(nil, purpose, req)
	}
	return serve.CountPurpose(m.purposeFunc, purpose, req)
}

// serverAsNode is one server reached as the node, for the node lease's heartbeat: an
// http.RoundTripper of path-only requests like cloudClient, but to that server only.
type serverAsNode struct {
	b       *remote.Backend
	metrics *hubMetrics
}

// RoundTrip implements http.RoundTripper. The heartbeat goes over the server's HTTP/2 connection
// (the watches'): its headers are compressed against the previous heartbeat's (HPACK), ~0.3 KB
// less each way than HTTP/1.1's, 8,640 times a day; and its verdict is that connection's.
func (n serverAsNode) RoundTrip(req *http.Request) (*http.Response, error) {
	return countPurpose(n.metrics, "heartbeat", req)(n.b.RoundTrip(remote.Route{Identity: remote.Node, Stream: true}, req))
}

// cloud returns the hub's cloud client.
func (s *Server) cloud() cloudClient { return cloudClient{s.balancer, s.metrics} }

// storeWait is how long one of the hub's own reads of a pool-scope resource waits for the shared
// store's first list before it reads the cloud itself.
const storeWait = 30 * time.Second

// awaitFirstList waits, at most storeWait, while the shared store of ri's resource reads its first
// list and online says the cloud is reachable: one of the hub's own readers then reads the store
// rather than the cloud a second time (bytes, and memory at start).
func (s *Server) awaitFirstList(ctx context.Context, ri *wire.RequestInfo, online func() bool) {
	st := s.pool.Pending(ri)
	if st == nil || !online() {
		return
	}
	t := time.NewTimer(storeWait)
	defer t.Stop()
	select {
	case <-st.FirstSynced():
	case <-t.C:
	case <-ctx.Done():
	}
}

// errOffline ends a watch of the hub's own readers when the cloud is unreachable.
var errOffline = errors.New("hub: the cloud is unreachable")

// ownFetch returns how one of the hub's own readers (named component, as in its User-Agent
// "nodehub/<component>") reads the cloud: a list of a pool-scope resource from the shared store
// once it holds one (fromStore); else as the node through the cloud client while the cloud is
// reachable, each 200 answer teed into the cache as the hub's own (cache.SelfComponent); while
// it is not, a get or list is answered from that cache and a watch waits for the cloud to come
// back, then fails so the reader lists again. Until the first probe's verdict a read waits for it:
// at start the cloud is not known unreachable, and a reader that took the cache's "never cached"
// would back off (the topology source, and so the filters, would start empty).
func (s *Server) ownFetch(component string) listwatch.Fetch {
	return func(ctx context.Context, path string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, path, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", wire.MediaJSON)
		req.Header.Set("User-Agent", "nodehub/"+component)
		ri, err := wire.ParseRequest(req)
		if err != nil {
			return nil, err
		}
		s.awaitFirstList(ctx, ri, s.state.Online)
		if st := s.pool.Store(ri); st != nil && ri.Verb == wire.VerbList {
			return fromStore(req, ri, st), nil
		}
		if s.state.verdict(ctx) != remote.Healthy && s.local != nil {
			if ri.Verb == wire.VerbWatch {
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-s.state.Changed():
					return nil, errOffline
				}
			}
			rec := &recordedResponse{header: http.Header{}, code: http.StatusOK}
			s.local.ServeHTTP(rec, req, &local.Request{Info: ri, Own: cache.SelfComponent, Shared: true})
			return rec.response(req), nil
		}
		resp, err := s.cloud().RoundTrip(req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode == http.StatusOK {
			serve.Keep(s.cache, ri, cache.SelfComponent, resp)
		}
		return resp, nil
	}
}

// recordedResponse is an answer of the local proxy kept in memory, for the hub's own readers.
type recordedResponse struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (r *recordedResponse) Header() http.Header         { return r.header }
func (r *recordedResponse) WriteHeader(code int)        { r.code = code }
func (r *recordedResponse) Write(p []byte) (int, error) { return r.body.Write(p) }

func (r *recordedResponse) response(req *http.Request) *http.Response {
	return &http.Response{StatusCode: r.code, Status: http.StatusText(r.code), Header: r.header,
		Body: io.NopCloser(&r.body), ContentLength: int64(r.body.Len()), Request: req}
}
