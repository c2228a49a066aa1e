package local

import (
	"encoding/json"
	"testing"
)

// FuzzApplyPatch feeds a client's patch of every type to the offline patcher, on a real Pod (as
// the apiserver wrote it) and on fuzzed documents: it fails cleanly or returns valid JSON, never
// panics.
func FuzzApplyPatch(f *testing.F) {
	pod := `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"default","labels":{"a":"b"}},"spec":{"containers":[{"name":"c","image":"i","env":[{"name":"E","value":"1"}]}],"tolerations":[{"key":"k"}]},"status":{"conditions":[{"type":"Ready","status":"True"}]}}`
	for i, p := range []string{
		`{"metadata":{"labels":{"a":null,"c":"d"}}}`,
		`{"spec":{"containers":[{"name":"c","image":"j"},{"name":"d","image":"k"}],"$setElementOrder/containers":[{"name":"d"},{"name":"c"}]}}`,
		`{"status":{"conditions":[{"type":"Ready","status":"False"}]},"$retainKeys":["status"]}`,
		`{"spec":{"containers":[{"name":"c","$patch":"delete"}]}}`,
		`[{"op":"add","path":"/metadata/labels/x","value":"y"},{"op":"remove","path":"/spec/tolerations/0"},{"op":"move","from":"/metadata/labels","path":"/l"}]`,
		`[{"op":"test","path":"/spec/containers/0/name","value":"c"},{"op":"copy","from":"/spec","path":"/spec/x"}]`,
	} {
		f.Add([]byte(pod), []byte(p), uint8(i))
	}
	types := []string{"application/merge-patch+json", "application/strategic-merge-patch+json", "application/json-patch+json"}
	f.Fuzz(func(t *testing.T, doc, patch []byte, typ uint8) {
		if len(doc) > 64<<10 || len(patch) > 64<<10 {
			return
		}
		out, err := applyPatch(doc, patch, types[int(typ)%len(types)])
		if err == nil && len(doc) > 0 && doc[0] == '{' && !json.Valid(out) {
			t.Fatalf("a patch of a JSON object gave invalid JSON: %q", out)
		}
	})
}
