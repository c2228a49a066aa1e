package endpointfix

import (
	"bytes"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"nodehub/filter"
)

// Resources are what the Fixer corrects (group/version/resource, as filter.Filter names them):
// EndpointSlices, and v1 Endpoints (which some CNI agents and ingresses still read).
var Resources = []string{"discovery.k8s.io/v1/endpointslices", "v1/endpoints"}

// Filter is the correction as a filter of the hub's chains (the cloud's answers and the shared
// stores'): it runs for every client. A slice the cloud sends while the link is up counts as the
// cloud's word on the pods it names.
func (f *Fixer) Filter() filter.Filter { return fixFilter{f} }

type fixFilter struct{ f *Fixer }

func (fixFilter) Name() string            { return "endpointfix" }
func (fixFilter) Resources() []string     { return Resources }
func (fixFilter) Components() []string    { return nil }
func (x fixFilter) Wants(raw []byte) bool { return x.f.view().mentions(raw, nil) }

func (x fixFilter) Filter(o *filter.Object) (filter.Verdict, error) {
	v := x.f.view()
	if !v.mentions(o.Raw, nil) {
		return filter.Keep, nil
	}
	t, err := o.Typed()
	if err != nil {
		return filter.Keep, err
	}
	changed := false
	switch obj := t.(type) {
	case *discoveryv1.EndpointSlice:
		changed = v.fixSlice(obj, x.f.observe)
	case *corev1.Endpoints:
		changed = v.fixEndpoints(obj, x.f.observe)
	}
	if !changed {
		return filter.Keep, nil
	}
	return filter.Changed, nil
}

// Watch is one open watch's side of the corrections: which view it served last.
type Watch struct {
	f    *Fixer
	last *view
}

// NewWatch starts one answer's view of the corrections (a list's, a get's, or a watch's). A
// watch's first Pass sends every slice served corrected, since the client may hold it as the
// cloud sent it (its list came from the cloud, or before a report), unless Served said what it
// was sent.
func (f *Fixer) NewWatch() *Watch { return &Watch{f: f, last: &view{}} }

// Served returns the correction of the moment for the objects the answer sends now (an offline
// list reads its items twice: both passes see the same view; a watch's initial events), and
// takes that view as sent: nil when nothing is corrected.
func (w *Watch) Served() func(raw []byte) []byte {
	v := w.f.view()
	w.last = v
	if len(v.pods) == 0 {
		return nil
	}
	return func(raw []byte) []byte {
		out, _ := v.apply(raw, w.f.observe)
		return out
	}
}

// Pass begins a pass of a watch over the slices it serves, with the newest view: fn returns a
// slice as served now and whether that differs from what the previous pass served (the watch
// sends it as MODIFIED); next is closed at the view's next change. fn is nil when no slice can
// have changed.
func (w *Watch) Pass() (fn func(raw []byte) ([]byte, bool), next <-chan struct{}) {
	next = w.f.Changed()
	cur, old := w.f.view(), w.last
	w.last = cur
	if cur.gen == old.gen {
		return nil, next
	}
	diff := differing(old, cur)
	if len(diff) == 0 {
		return nil, next
	}
	return func(raw []byte) ([]byte, bool) {
		if !cur.mentions(raw, diff) {
			return raw, false
		}
		now, nowChanged := cur.apply(raw, w.f.observe)
		was, wasChanged := old.apply(raw, nil)
		if !nowChanged && !wasChanged {
			return raw, false
		}
		return now, !bytes.Equal(now, was)
	}, next
}
