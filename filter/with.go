package filter

// Prepend returns a chain of resource's answers that runs f before c's filters (c may be nil: then
// f alone), for every component. The hub adds its own corrections this way (hub/endpointfix, which
// decides which requests they read), which are not a configurable filter.
func Prepend(c *Chain, resource string, f Filter) *Chain {
	if c == nil {
		return &Chain{resource: resource, filters: []Filter{f}}
	}
	out := *c
	out.filters = append([]Filter{f}, c.filters...)
	return &out
}
