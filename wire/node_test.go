package wire

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestReadNodeFacts(t *testing.T) {
	node := &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"a": "1", "openyurt.io/is-edge-worker": "false"},
			Annotations: map[string]string{"x": `"type":"Autonomy","status":"True"`, "node.beta.openyurt.io/autonomy": "true"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: "Ready", Status: "True"}, {Type: "Autonomy", Status: "False"}}}}
	js, _ := json.Marshal(node)
	pb, err := EncodeProto("v1", "Node", node)
	if err != nil {
		t.Fatal(err)
	}
	want := NodeFacts{Annotation: "true", HasAnnotation: true, Label: "false", HasLabel: true, Condition: "False", HasCondition: true}
	for name, raw := range map[string][]byte{"json": js, "protobuf": pb} {
		got, err := ReadNodeFacts(raw, "node.beta.openyurt.io/autonomy", "openyurt.io/is-edge-worker", "Autonomy")
		if err != nil || got != want {
			t.Fatalf("%s: %+v %v", name, got, err)
		}
	}
	bare := &corev1.Node{TypeMeta: node.TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	js, _ = json.Marshal(bare)
	pb, _ = EncodeProto("v1", "Node", bare)
	for name, raw := range map[string][]byte{"json": js, "protobuf": pb} {
		got, err := ReadNodeFacts(raw, "node.beta.openyurt.io/autonomy", "openyurt.io/is-edge-worker", "Autonomy")
		if err != nil || got != (NodeFacts{}) {
			t.Fatalf("%s bare: %+v %v", name, got, err)
		}
	}
	for _, bad := range []string{`{"kind":"Node","status":{"conditions":[{"type":"Autonomy"`, `{"kind":"Pod"}`, "k8s\x00\x0a"} {
		if _, err := ReadNodeFacts([]byte(bad), "a", "b", "c"); err == nil {
			t.Fatalf("%q: no error", bad)
		}
	}
}

func FuzzReadNodeFacts(f *testing.F) {
	f.Add([]byte(`{"kind":"Node","metadata":{"labels":{"a":"b"}},"status":{"conditions":[{"type":"Autonomy","status":"True"}]}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		_, _ = ReadNodeFacts(raw, "a", "b", "Autonomy")
	})
}

// kubelet reads its node every 10 s through the hub, which reads the node's facts on each: only
// the values it keeps are copied (the envelope's apiVersion and kind, the annotation, the label and
// the condition's status), not every label, annotation and condition it looks at.
func TestReadNodeFactsCopiesOnlyWhatItKeeps(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n",
		Labels:      map[string]string{"a": "1", "b": "2", "c": "3", "openyurt.io/is-edge-worker": "true"},
		Annotations: map[string]string{"x": "1", "y": "2", "node.beta.openyurt.io/autonomy": "true"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: "Ready", Status: "True"}, {Type: "MemoryPressure", Status: "False"},
			{Type: "DiskPressure", Status: "False"}, {Type: "Autonomy", Status: "True"}}}}
	pb, err := EncodeProto("v1", "Node", node)
	if err != nil {
		t.Fatal(err)
	}
	n := testing.AllocsPerRun(100, func() {
		_, _ = ReadNodeFacts(pb, "node.beta.openyurt.io/autonomy", "openyurt.io/is-edge-worker", "Autonomy")
	})
	if n > 5 {
		t.Fatalf("%v allocations per read, want at most 5", n)
	}
}
