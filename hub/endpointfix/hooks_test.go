package endpointfix

import (
	"testing"

	"nodehub/wire"
)

// The corrections join the chain of every client's reads of whole slices and of nothing else; a
// nil Fixer (no cache) joins none.
func TestChainTakesReadsOfWholeSlicesOnly(t *testing.T) {
	f := New("node-a", 0, nil)
	slices := func(verb string) *wire.RequestInfo {
		return &wire.RequestInfo{IsResource: true, Verb: verb, Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}
	}
	for _, tc := range []struct {
		name string
		ri   *wire.RequestInfo
		want bool
	}{
		{"list of slices", slices(wire.VerbList), true},
		{"watch of slices", slices(wire.VerbWatch), true},
		{"get of v1 endpoints", &wire.RequestInfo{IsResource: true, Verb: wire.VerbGet, Version: "v1", Resource: "endpoints"}, true},
		{"create of a slice", slices(wire.VerbCreate), false},
		{"pods", &wire.RequestInfo{IsResource: true, Verb: wire.VerbList, Version: "v1", Resource: "pods"}, false},
		{"a partial object", func() *wire.RequestInfo {
			ri := slices(wire.VerbList)
			ri.Accept.As = "PartialObjectMetadataList"
			return ri
		}(), false},
		{"an older version", &wire.RequestInfo{IsResource: true, Verb: wire.VerbList, Group: "discovery.k8s.io", Version: "v1beta1", Resource: "endpointslices"}, false},
	} {
		c := f.Chain(nil, tc.ri, true)
		if got := c != nil && c.Uses("endpointfix"); got != tc.want {
			t.Errorf("%s: in the chain %v, want %v", tc.name, got, tc.want)
		}
	}
	if c := f.Chain(nil, slices(wire.VerbList), false); c != nil {
		t.Error("the cloud's answers get the corrections while nothing is corrected")
	}
	var none *Fixer
	if c := none.Chain(nil, slices(wire.VerbList), true); c != nil || none.StoreRevisions(slices(wire.VerbWatch)) != nil || none.SendingWrite(slices(wire.VerbList), true) != nil {
		t.Error("a nil Fixer corrects")
	}
}
