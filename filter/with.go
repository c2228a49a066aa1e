package filter

import (
	"slices"

	"nodehub/wire"
)

// With returns a chain that runs f before c's filters, for every component, when the request is
// a get, list or watch of one of f's resources (c may be nil: then f alone); otherwise c. The hub
// adds its own corrections this way (hub/endpointfix), which are not a configurable filter.
func With(c *Chain, ri *wire.RequestInfo, f Filter) *Chain {
	if f == nil || !ri.IsResource || ri.Subresource != "" || ri.Accept.As != "" {
		return c
	}
	if ri.Verb != wire.VerbGet && ri.Verb != wire.VerbList && ri.Verb != wire.VerbWatch || !slices.Contains(f.Resources(), ri.GVR()) {
		return c
	}
	if c == nil {
		return &Chain{resource: ri.Resource, filters: []Filter{f}}
	}
	out := *c
	out.filters = append([]Filter{f}, c.filters...)
	return &out
}
