package hub

import (
	"net/http"

	"nodehub/hub/remote"
)

// cloudClient is the hub's one way of reaching the cloud as the node for its own requests (pool
// sharing, OTA, GC, the topology source): an http.RoundTripper whose requests carry only a path
// and query ("/api/v1/pods?..."); a healthy server chosen by the balancer answers, with the node's
// identity, a watch on a streaming connection. The node lease's heartbeat is the exception: it
// goes to each server through that server's own Backend.
type cloudClient struct{ balancer *remote.Balancer }

// RoundTrip implements http.RoundTripper.
func (c cloudClient) RoundTrip(req *http.Request) (*http.Response, error) {
	stream := req.URL.Query().Get("watch") != ""
	return c.balancer.RoundTrip(req.WithContext(remote.WithRoute(req.Context(), remote.Route{Identity: remote.Node, Stream: stream})))
}

// cloud returns the hub's cloud client.
func (s *Server) cloud() cloudClient { return cloudClient{s.balancer} }
