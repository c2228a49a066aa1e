package wire

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestExtractMetaJSONAndProtobufAgree(t *testing.T) {
	js, pb := encoders(t)
	for _, enc := range [][]byte{encode(t, js, testPod(3)), encode(t, pb, testPod(3))} {
		enc = bytes.TrimSuffix(enc, []byte("\n"))
		m, err := ExtractMeta(enc, "pods")
		if err != nil {
			t.Fatal(err)
		}
		if m.Name != "p-3" || m.Namespace != "ns" || m.UID != "u" || m.ResourceVersion != "103" || m.Kind != "Pod" || m.APIVersion != "v1" {
			t.Fatalf("meta %+v", m)
		}
		if m.Labels["app"] != "x" || m.Labels["i"] != "3" || len(m.Labels) != 2 {
			t.Fatalf("labels %v", m.Labels)
		}
		want := map[string]string{"spec.nodeName": "edge-1", "status.phase": "Running", "spec.hostNetwork": "false", "status.podIP": "", "spec.restartPolicy": ""}
		for k, v := range want {
			if got, ok := m.FieldValue(k, enc); !ok || got != v {
				t.Errorf("field %s = %q,%v want %q", k, got, ok, v)
			}
		}
		if got, _ := m.FieldValue("metadata.name", enc); got != "p-3" {
			t.Errorf("metadata.name %q", got)
		}
		if v, ok := VersionOf(enc); !ok || v != (Version{"ns", "p-3", "103"}) {
			t.Errorf("VersionOf %+v, %v", v, ok)
		}
	}
	for _, raw := range [][]byte{[]byte(`{"kind":"Pod"}`), []byte("k8s\x00\x0a")} {
		if v, ok := VersionOf(raw); ok {
			t.Errorf("VersionOf(%q) = %+v", raw, v)
		}
	}
}

func TestJSONFieldOfCustomResource(t *testing.T) {
	obj := []byte(`{"apiVersion":"apps.openyurt.io/v1beta2","kind":"NodePool","metadata":{"name":"a"},"spec":{"type":"Edge","replicas":3,"on":true,"x":{"y":"z"}}}`)
	for path, want := range map[string]string{"spec.type": "Edge", "spec.replicas": "3", "spec.on": "true", "spec.x.y": "z"} {
		if got, ok := JSONField(obj, path); !ok || got != want {
			t.Errorf("%s = %q,%v", path, got, ok)
		}
	}
	if _, ok := JSONField(obj, "spec.x"); ok {
		t.Error("an object is not a scalar")
	}
}

func FuzzJSONMember(f *testing.F) {
	f.Add([]byte(`{"a":{"b":"}"},"metadata":{"name":"x"},"c":[1,{"d":2}]}`), "metadata")
	f.Fuzz(func(t *testing.T, obj []byte, key string) {
		v, ok := jsonMember(obj, key)
		if ok && len(v) == 0 {
			t.Fatal("empty value")
		}
		_, _ = ExtractMeta(obj, "pods")
	})
}

// A list's resourceVersion is read from its metadata without splitting its items, as the list
// splitter reads it (real apiserver answers, JSON and protobuf).
func TestListResourceVersionOf(t *testing.T) {
	for _, name := range []string{"pods-list.json", "pods-list.pb", "endpointslices-list.pb"} {
		raw, err := os.ReadFile(filepath.Join("testdata", "real", name))
		if err != nil {
			t.Fatal(err)
		}
		var want string
		sp := NewListSplitter(ParseMediaType(map[bool]string{true: MediaProtobuf, false: MediaJSON}[IsProtobuf(raw)]),
			ListHandler{Meta: func(m ListMeta) { want = m.ResourceVersion }, Item: func([]byte) error { return nil }})
		if _, err := sp.Write(raw); err != nil {
			t.Fatal(err)
		}
		if rv, ok := ListResourceVersionOf(raw); !ok || rv != want || rv == "" {
			t.Errorf("%s: %q, %v; the splitter read %q", name, rv, ok, want)
		}
	}
}
