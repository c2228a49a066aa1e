package cache

import (
	"testing"

	"nodehub/wire"
)

// FuzzSelector parses a client's label and field selectors and evaluates them on a real object:
// a bad selector is an error (the client gets 400), never a panic.
func FuzzSelector(f *testing.F) {
	for _, s := range [][2]string{
		{"app=web,tier!=db", "spec.nodeName=edge-1"},
		{"env in (a,b),!gone,has", "metadata.name=x,metadata.namespace!=y"},
		{"x notin (a), y", "status.phase=Running"},
		{"", "spec.nodeName=,involvedObject.kind=Pod"},
		{"a.b/c-d=e_f", "type=kubernetes.io/service-account-token"},
	} {
		f.Add(s[0], s[1])
	}
	raw := []byte(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"default","labels":{"app":"web","tier":"fe"}},"spec":{"nodeName":"edge-1"},"status":{"phase":"Running"}}`)
	m, err := wire.ExtractMeta(raw, "pods")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, ls, fs string) {
		sel, err := NewSelector("default", ls, fs)
		if err != nil {
			return
		}
		_ = sel.MatchesMeta(m, func() []byte { return raw })
		_ = sel.Everything()
	})
}
