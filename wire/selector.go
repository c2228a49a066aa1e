package wire

import (
	"fmt"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

// Selector is a list's scope: a namespace ("" for all) and its label and field selectors.
type Selector struct {
	Namespace string
	labels    labels.Selector
	fields    fields.Selector
	// Raw texts, as the client sent them.
	LabelSelector, FieldSelector string
}

// NewSelector parses a list's selectors; bad ones are an error the caller answers with 400.
func NewSelector(namespace, labelSelector, fieldSelector string) (Selector, error) {
	s := Selector{Namespace: namespace, LabelSelector: labelSelector, FieldSelector: fieldSelector}
	var err error
	if labelSelector != "" { // an empty one is not parsed: nil selects everything
		if s.labels, err = labels.Parse(labelSelector); err != nil {
			return Selector{}, fmt.Errorf("labelSelector: %w", err)
		}
	}
	if fieldSelector != "" {
		if s.fields, err = fields.ParseSelector(fieldSelector); err != nil {
			return Selector{}, fmt.Errorf("fieldSelector: %w", err)
		}
	}
	return s, nil
}

// Everything reports whether the selector selects every object of its namespace.
func (s Selector) Everything() bool {
	return (s.labels == nil || s.labels.Empty()) && (s.fields == nil || s.fields.Empty())
}

// MatchesMeta evaluates the selector on an object's metadata; body (which may be nil, or fetched
// lazily) is consulted only for a field the metadata does not carry.
func (s Selector) MatchesMeta(m Meta, body func() []byte) bool {
	return s.MatchesObject(m.Namespace, labels.Set(m.Labels), func(path string) (string, bool) {
		v, ok := m.FieldValue(path, nil)
		if !ok && body != nil {
			v, ok = m.FieldValue(path, body())
		}
		return v, ok
	})
}

// MatchesObject evaluates the selector on an object's namespace, labels and field values (the
// pool's in-memory store keeps them compactly, not as Meta).
func (s Selector) MatchesObject(namespace string, lbls labels.Labels, field func(path string) (string, bool)) bool {
	if s.Namespace != "" && namespace != s.Namespace {
		return false
	}
	if s.labels != nil && !s.labels.Empty() && !s.labels.Matches(lbls) {
		return false
	}
	if s.fields == nil || s.fields.Empty() {
		return true
	}
	set := fields.Set{}
	for _, r := range s.fields.Requirements() {
		if v, ok := field(r.Field); ok {
			set[r.Field] = v
		}
	}
	return s.fields.Matches(set)
}
