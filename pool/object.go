package pool

import (
	"strconv"
	"unique"

	"nodehub/wire"
)

// object is one stored object: its raw bytes as the upstream sent them, and what selectors need,
// kept compactly — flat key/value slices rather than maps, which saves about 400 bytes per object.
type object struct {
	raw             []byte
	namespace, name string
	rv              uint64
	labels          pairs
	fields          pairs // the resource's selectable fields (spec.clusterIP, spec.type for services)
	refs            int   // events of its store's window that hold it (Store.mu)
}

func newObject(raw []byte, res Resource) (*object, error) {
	m, err := wire.ExtractMeta(raw, res.Resource)
	if err != nil {
		return nil, err
	}
	return &object{raw: raw, namespace: unique.Make(m.Namespace).Value(), name: m.Name, rv: parseRV(m.ResourceVersion),
		labels: toPairs(m.Labels), fields: toPairs(m.Fields)}, nil
}

func parseRV(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

func (o *object) key() string { return o.namespace + "/" + o.name }

// matches evaluates a list's or watch's namespace and selectors on the object.
func (o *object) matches(sel wire.Selector) bool {
	return sel.MatchesObject(o.namespace, o.labels, func(path string) (string, bool) {
		switch path {
		case "metadata.name":
			return o.name, true
		case "metadata.namespace":
			return o.namespace, true
		}
		if v, ok := o.fields.Lookup(path); ok {
			return v, true
		}
		if len(o.raw) > 0 && o.raw[0] == '{' {
			return wire.JSONField(o.raw, path) // a custom resource's own selectable fields
		}
		return "", false
	})
}

// selectable returns what selectors read of o: o without its bytes, which the event window then
// does not keep alive once o is replaced (a JSON object keeps them: a custom resource's own
// selectable fields are read from them).
func (o *object) selectable() *object {
	if o == nil || len(o.raw) > 0 && o.raw[0] == '{' {
		return o
	}
	c := *o
	c.raw = nil
	return &c
}

// pairs is a small map as key, value, key, value…; it is a labels.Labels.
type pairs []string

// toPairs flattens a map; its keys (and namespaces, above) are interned: every object of a
// resource carries the same few.
func toPairs(m map[string]string) pairs {
	if len(m) == 0 {
		return nil
	}
	out := make(pairs, 0, 2*len(m))
	for k, v := range m {
		out = append(out, unique.Make(k).Value(), v)
	}
	return out
}

func (p pairs) Lookup(k string) (string, bool) {
	for i := 0; i+1 < len(p); i += 2 {
		if p[i] == k {
			return p[i+1], true
		}
	}
	return "", false
}

func (p pairs) Has(k string) bool {
	_, ok := p.Lookup(k)
	return ok
}

func (p pairs) Get(k string) string {
	v, _ := p.Lookup(k)
	return v
}
