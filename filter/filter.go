// Package filter rewrites cloud responses for the edge, as YurtHub's filters do: one file per
// filter, one interface, one table. A filter says which resources it looks at and, by default,
// for which components; the chain for a request holds the filters that approve it, in the fixed
// order of the table. Objects pass through as bytes; only an object a filter changes is decoded
// into its k8s.io/api type and encoded again, and a request no filter approves is not touched.
package filter

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/wire"
)

// Verdict is what a filter does to one object.
type Verdict int

const (
	// Keep leaves the object as it is.
	Keep Verdict = iota
	// Changed means the filter modified the typed object (Object.Typed); the chain encodes it.
	Changed
	// Drop removes the object (from a list; in a watch it becomes a DELETED event).
	Drop
)

// Filter rewrites objects of some resources for some components.
type Filter interface {
	// Name is the filter's name, as --disabled-resource-filters and --filter-components use it.
	Name() string
	// Resources are the group/version/resource names it looks at ("v1/services").
	Resources() []string
	// Components are the clients it serves by default.
	Components() []string
	// Wants is a cheap look at the raw bytes: false when the filter surely leaves the object as it
	// is (most objects), so the chain does not even read its metadata.
	Wants(raw []byte) bool
	// Filter decides about one object; it may change obj.Typed() and say Changed.
	Filter(obj *Object) (Verdict, error)
}

// Object is one object passing through a chain.
type Object struct {
	// Raw is the object as the cloud sent it (JSON, or the protobuf envelope).
	Raw []byte
	// Meta is read from Raw without decoding it.
	Meta  wire.Meta
	typed wire.Typed
	meta  *metav1.ObjectMeta
}

// NewObject reads an object's metadata for the chain.
func NewObject(raw []byte, resource string) (*Object, error) {
	m, err := wire.ExtractMeta(raw, resource)
	if err != nil {
		return nil, err
	}
	return &Object{Raw: raw, Meta: m}, nil
}

// Typed decodes the object (once) into its k8s.io/api type.
func (o *Object) Typed() (wire.Typed, error) {
	if o.typed == nil {
		t, err := wire.Decode(o.Raw)
		if err != nil {
			return nil, err
		}
		o.typed = t
	}
	return o.typed, nil
}

// Annotations decodes just the object's metadata (once) and returns its annotations.
func (o *Object) Annotations() map[string]string {
	if o.meta == nil {
		om, err := wire.ObjectMeta(o.Raw)
		if err != nil {
			return nil
		}
		o.meta = &om
	}
	return o.meta.Annotations
}

// Is reports whether the object is namespace/name.
func (o *Object) Is(namespace, name string) bool {
	return o.Meta.Namespace == namespace && o.Meta.Name == name
}

// Mentions reports whether the raw bytes contain s (a cheap test before decoding).
func (o *Object) Mentions(s string) bool { return mentions(o.Raw, s) }

func mentions(raw []byte, s string) bool { return bytes.Contains(raw, []byte(s)) }

// Chain is the filters that apply to one request, in order.
type Chain struct {
	filters  []Filter
	resource string
	// OnError and OnChange, if set, are told about each filter error and each change or drop.
	OnError  func(filter string)
	OnChange func(filter string, v Verdict)
}

// Uses reports whether the chain runs the named filter.
func (c *Chain) Uses(name string) bool {
	for _, f := range c.filters {
		if f.Name() == name {
			return true
		}
	}
	return false
}

// Names lists the chain's filters.
func (c *Chain) Names() []string {
	out := make([]string, len(c.filters))
	for i, f := range c.filters {
		out[i] = f.Name()
	}
	return out
}

// Apply runs the chain on one raw object. It returns Keep and the very slice it was given when no
// filter changed it, Changed and the object re-encoded in the same format when one did, or Drop.
// A filter's error leaves the object as the cloud sent it.
func (c *Chain) Apply(raw []byte) ([]byte, Verdict) {
	if !c.wants(raw) {
		return raw, Keep
	}
	obj, err := NewObject(raw, c.resource)
	if err != nil {
		c.errorf("meta")
		return raw, Keep
	}
	changed := false
	for _, f := range c.filters {
		v, err := f.Filter(obj)
		if err != nil {
			c.errorf(f.Name())
			return raw, Keep
		}
		if v != Keep && c.OnChange != nil {
			c.OnChange(f.Name(), v)
		}
		switch v {
		case Drop:
			return nil, Drop
		case Changed:
			changed = true
		}
	}
	if !changed {
		return raw, Keep
	}
	out, err := wire.Encode(obj.typed, wire.IsProtobuf(raw))
	if err != nil {
		c.errorf("encode")
		return raw, Keep
	}
	return out, Changed
}

func (c *Chain) errorf(name string) {
	if c.OnError != nil {
		c.OnError(name)
	}
}

// Config is how the filters are set up, from flags.
type Config struct {
	// Enabled turns filtering on (--enable-resource-filter).
	Enabled bool
	// Disabled filters by name; "*" disables all (--disabled-resource-filters).
	Disabled []string
	// Components adds components to filters (--filter-components name=comp1,comp2).
	Components map[string][]string
	// WorkingMode "cloud" turns off the filters that only make sense on edge nodes.
	WorkingMode string

	// MasterServiceHost and MasterServicePort are where pods reach the hub's secure port.
	MasterServiceHost string
	MasterServicePort int
	// NodeName and NodePool are this node's.
	NodeName, NodePool string
	// Topology feeds servicetopology; nil leaves every endpoint in place.
	Topology Topology
}

// edgeOnly are turned off in --working-mode=cloud.
var edgeOnly = map[string]bool{"discardcloudservice": true, "forwardkubesvctraffic": true, "serviceenvupdater": true}

// Set is the configured filters.
type Set struct {
	filters    []Filter
	components map[string]map[string]bool // filter → components
}

// New builds the filters in their fixed order and applies the configuration.
func New(cfg Config) (*Set, error) {
	all := table(cfg)
	known := map[string]bool{}
	for _, f := range all {
		known[f.Name()] = true
	}
	for _, d := range cfg.Disabled {
		if d != "*" && !known[d] {
			return nil, fmt.Errorf("unknown filter %q (known: %s)", d, strings.Join(Names(), ", "))
		}
	}
	for name := range cfg.Components {
		if !known[name] {
			return nil, fmt.Errorf("unknown filter %q (known: %s)", name, strings.Join(Names(), ", "))
		}
	}
	s := &Set{components: map[string]map[string]bool{}}
	if !cfg.Enabled || slices.Contains(cfg.Disabled, "*") {
		return s, nil
	}
	for _, f := range all {
		if slices.Contains(cfg.Disabled, f.Name()) || cfg.WorkingMode == "cloud" && edgeOnly[f.Name()] {
			continue
		}
		comps := map[string]bool{}
		for _, c := range append(f.Components(), cfg.Components[f.Name()]...) {
			comps[c] = true
		}
		s.filters = append(s.filters, f)
		s.components[f.Name()] = comps
	}
	return s, nil
}

// Uses reports whether the named filter is on.
func (s *Set) Uses(name string) bool {
	if s == nil {
		return false
	}
	_, ok := s.components[name]
	return ok
}

// Names are the filters nodehub has, in the order they run.
func Names() []string {
	var out []string
	for _, f := range table(Config{}) {
		out = append(out, f.Name())
	}
	return out
}

// For returns the chain for a request, or nil when no filter approves it (get, list and watch of
// a filtered resource by a filtered component).
func (s *Set) For(ri *wire.RequestInfo) *Chain {
	if s == nil || len(s.filters) == 0 || !ri.IsResource || ri.Subresource != "" || ri.Accept.As != "" {
		return nil
	}
	if ri.Verb != wire.VerbGet && ri.Verb != wire.VerbList && ri.Verb != wire.VerbWatch {
		return nil
	}
	var c *Chain
	gvr := ""
	for _, f := range s.filters {
		if !s.components[f.Name()][ri.Component] {
			continue // the cheap test first: most requests come from components no filter serves
		}
		if gvr == "" {
			gvr = ri.GVR()
		}
		if !slices.Contains(f.Resources(), gvr) {
			continue
		}
		if c == nil {
			c = &Chain{resource: ri.Resource}
		}
		c.filters = append(c.filters, f)
	}
	return c
}
