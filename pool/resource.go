// Package pool shares the list and watch of pool-scope resources (services, endpointslices):
// on one node, every local client is served from one in-memory store fed by one upstream
// list+watch per resource; across a node pool, one elected hub (the leader) feeds its store from
// the cloud and serves it to the others (followers) over mTLS, so one copy of the data crosses
// the cloud link per pool. A follower that loses its leader goes to the cloud directly, resuming
// by resourceVersion, and its clients' watches never notice.
package pool

import (
	"fmt"
	"net/url"
	"strings"

	"nodehub/wire"
)

// DefaultResources is --pool-scope-resources' default.
const DefaultResources = "/v1/services,discovery.k8s.io/v1/endpointslices"

// Resource is one pool-scope resource: group ("" for the core API), version and plural name.
type Resource struct {
	Group, Version, Resource string
	// Namespace and the selectors narrow what a store holds (the election's leases, the pool's
	// NodePool); the pool-scope resources leave them empty: all namespaces, every object.
	Namespace, LabelSelector, FieldSelector string
}

// ParseResources reads --pool-scope-resources: comma-separated group/version/resource, with an
// empty group for the core API ("/v1/services").
func ParseResources(v string) ([]Resource, error) {
	var out []Resource
	seen := map[Resource]bool{}
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		p := strings.Split(s, "/")
		if len(p) != 3 || p[1] == "" || p[2] == "" || strings.ContainsAny(s, " ?") {
			return nil, fmt.Errorf("%q is not group/version/resource (the core group is empty: /v1/services)", s)
		}
		r := Resource{Group: p[0], Version: p[1], Resource: strings.ToLower(p[2])}
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	return out, nil
}

// Path is the resource's collection URL path (all namespaces unless Namespace is set).
func (r Resource) Path() string {
	p := "/apis/" + r.Group + "/" + r.Version
	if r.Group == "" {
		p = "/api/" + r.Version
	}
	if r.Namespace != "" {
		p += "/namespaces/" + r.Namespace
	}
	return p + "/" + r.Resource
}

// url is the collection's URL with a query (and the label selector, if any).
func (r Resource) url(query string) string {
	if r.LabelSelector != "" {
		if query != "" {
			query += "&"
		}
		query += "labelSelector=" + url.QueryEscape(r.LabelSelector)
	}
	if r.FieldSelector != "" {
		if query != "" {
			query += "&"
		}
		query += "fieldSelector=" + url.QueryEscape(r.FieldSelector)
	}
	if query == "" {
		return r.Path()
	}
	return r.Path() + "?" + query
}

// String is group/version/resource as the flag writes it.
func (r Resource) String() string { return r.Group + "/" + r.Version + "/" + r.Resource }

// Of returns the resource a request addresses.
func Of(ri *wire.RequestInfo) Resource {
	return Resource{Group: ri.Group, Version: ri.Version, Resource: ri.Resource}
}
