package wire

import (
	"os"
	"path/filepath"
	"testing"
)

// realSeeds are answers captured from a real kube-apiserver (testdata/real; see its README):
// lists, objects and watch streams in JSON and protobuf.
func realSeeds(f *testing.F, glob string) [][]byte {
	f.Helper()
	paths, _ := filepath.Glob(filepath.Join("testdata", "real", glob))
	var out [][]byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// FuzzExtractMeta reads metadata from an object as the cloud sent it, JSON or protobuf: a
// malformed object is an error, never a panic; VersionOf reads a protobuf object's namespace, name
// and resourceVersion as ExtractMeta does.
func FuzzExtractMeta(f *testing.F) {
	for _, b := range realSeeds(f, "*object*") {
		f.Add(b, "pods")
	}
	f.Add([]byte(`{"metadata":{"name":"a","namespace":"b","labels":{"x":"y"},"resourceVersion":"5"},"spec":{"nodeName":"n"}}`), "pods")
	f.Fuzz(func(t *testing.T, raw []byte, resource string) {
		v, _ := VersionOf(raw)
		_, _ = ListResourceVersionOf(raw)
		m, err := ExtractMeta(raw, resource)
		if err != nil {
			return
		}
		if IsProtobuf(raw) && v != (Version{m.Namespace, m.Name, m.ResourceVersion}) {
			t.Fatalf("VersionOf %+v, ExtractMeta %+v", v, m)
		}
		for _, p := range []string{"metadata.name", "spec.nodeName", "status.phase", "spec.clusterIP"} {
			_, _ = m.FieldValue(p, raw)
		}
		_ = WholeObject(raw)
	})
}

// FuzzConvert decodes an object into its k8s.io/api type and encodes it in the other format, as
// the offline proxy does for a client that wants another format than stored.
func FuzzConvert(f *testing.F) {
	for _, b := range realSeeds(f, "*object*") {
		f.Add(b, true)
		f.Add(b, false)
	}
	f.Add([]byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"},"data":{"k":"v"}}`), true)
	f.Fuzz(func(t *testing.T, raw []byte, protobuf bool) {
		_, _ = Convert(raw, protobuf)
	})
}

// FuzzDecodeProtoWatchEvent reads one protobuf watch frame from the cloud or a pool leader.
func FuzzDecodeProtoWatchEvent(f *testing.F) {
	f.Add(EncodeProtoWatchEvent(WatchEvent{Type: "ADDED", Object: []byte("k8s\x00\n\x04\n\x02v1\x12\x00")})[4:])
	for _, b := range realSeeds(f, "*watch*.pb") {
		if len(b) > 4 {
			f.Add(b[4:])
		}
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		_, _ = DecodeProtoWatchEvent(frame)
	})
}

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
	m, err := ExtractMeta(raw, "pods")
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
