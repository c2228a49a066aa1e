package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func jsonEq(t *testing.T, got []byte, want string) {
	t.Helper()
	var a, b any
	if err := json.Unmarshal(got, &a); err != nil {
		t.Fatal(err)
	}
	json.Unmarshal([]byte(want), &b)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("got %s\nwant %s", got, want)
	}
}

func TestMergePatch(t *testing.T) {
	out, err := mergePatch([]byte(`{"a":{"b":1,"c":2},"d":[1,2],"e":"x"}`), []byte(`{"a":{"b":null,"z":3},"d":[9],"e":null}`))
	if err != nil {
		t.Fatal(err)
	}
	jsonEq(t, out, `{"a":{"c":2,"z":3},"d":[9]}`)
}

func TestJSONPatch(t *testing.T) {
	doc := []byte(`{"metadata":{"labels":{"a/b":"1"}},"list":[1,2,3]}`)
	out, err := jsonPatch(doc, []byte(`[
		{"op":"add","path":"/metadata/labels/c","value":"2"},
		{"op":"replace","path":"/metadata/labels/a~1b","value":"9"},
		{"op":"remove","path":"/list/0"},
		{"op":"add","path":"/list/-","value":4},
		{"op":"test","path":"/list/0","value":2},
		{"op":"copy","from":"/list/0","path":"/first"},
		{"op":"move","from":"/first","path":"/moved"}]`))
	if err != nil {
		t.Fatal(err)
	}
	jsonEq(t, out, `{"metadata":{"labels":{"a/b":"9","c":"2"}},"list":[2,3,4],"moved":2}`)
	for _, bad := range []string{
		`[{"op":"replace","path":"/nope","value":1}]`,
		`[{"op":"test","path":"/list/0","value":7}]`,
		`[{"op":"remove","path":"/list/9"}]`,
		`[{"op":"jump","path":"/list"}]`,
		`not json`,
	} {
		if _, err := jsonPatch(doc, []byte(bad)); err == nil {
			t.Errorf("patch %s applied", bad)
		}
	}
}

func TestStrategicMergePatchOfNodeStatusKeepsOtherConditions(t *testing.T) {
	node := []byte(`{"kind":"Node","apiVersion":"v1","metadata":{"name":"n"},"status":{"conditions":[{"type":"Ready","status":"True"},{"type":"DiskPressure","status":"False"}]}}`)
	out, err := applyPatch(node, []byte(`{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Offline"}]}}`), "application/strategic-merge-patch+json")
	if err != nil {
		t.Fatal(err)
	}
	var n struct {
		Status struct {
			Conditions []struct{ Type, Status, Reason string } `json:"conditions"`
		} `json:"status"`
	}
	json.Unmarshal(out, &n)
	if len(n.Status.Conditions) != 2 || n.Status.Conditions[0].Status != "False" || n.Status.Conditions[0].Reason != "Offline" {
		t.Fatalf("strategic merge by condition type failed: %s", out)
	}
	if _, err := applyPatch(node, []byte(`{}`), "application/apply-patch+yaml"); err == nil {
		t.Fatal("server-side apply accepted offline")
	}
}

// What kubelet sends for a node status update: a two-way strategic merge patch with directives.
func TestStrategicMergePatchAsKubeletSendsIt(t *testing.T) {
	node := []byte(`{"kind":"Node","apiVersion":"v1","metadata":{"name":"n","labels":{"a":"1","b":"2"}},"spec":{"taints":[{"key":"k1","effect":"NoSchedule"}]},"status":{"conditions":[{"type":"Ready","status":"True"},{"type":"MemoryPressure","status":"False"}],"addresses":[{"type":"InternalIP","address":"10.0.0.1"}],"images":[{"names":["a"]}]}}`)
	patch := []byte(`{"metadata":{"labels":{"b":null,"c":"3"}},"spec":{"taints":[{"key":"k2","effect":"NoExecute"}]},"status":{"$setElementOrder/conditions":[{"type":"Ready"},{"type":"MemoryPressure"}],"conditions":[{"type":"Ready","status":"False","reason":"KubeletNotReady"}],"images":[{"names":["b"]}],"addresses":[{"type":"Hostname","address":"n"}]}}`)
	out, err := applyPatch(node, patch, "application/strategic-merge-patch+json")
	if err != nil {
		t.Fatal(err)
	}
	// conditions and addresses merge by type; taints and images (no patch strategy) are replaced.
	jsonEq(t, out, `{"kind":"Node","apiVersion":"v1","metadata":{"name":"n","labels":{"a":"1","c":"3"}},
		"spec":{"taints":[{"key":"k2","effect":"NoExecute"}]},
		"status":{"conditions":[{"type":"Ready","status":"False","reason":"KubeletNotReady"},{"type":"MemoryPressure","status":"False"}],
		"addresses":[{"type":"InternalIP","address":"10.0.0.1"},{"type":"Hostname","address":"n"}],"images":[{"names":["b"]}]}}`)
}

// A JSON patch's copy doubles a document with two operations; 4 KB of them once took the hub to
// 1.4 GB (issue 23). Copies are deep (RFC 6902), and what they copy together, what a patch adds
// and what it costs are bounded: the bomb is refused with a 422 Status having allocated little.
func TestJSONPatchCopyBombIsBounded(t *testing.T) {
	pod := []byte(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"default"},"spec":{"nodeName":"n"},"status":{"l0":"` + strings.Repeat("x", 200) + `"}}`)
	var ops []string
	for i := 1; i <= 30; i++ {
		ops = append(ops,
			fmt.Sprintf(`{"op":"add","path":"/status/l%d","value":{}}`, i),
			fmt.Sprintf(`{"op":"copy","from":"/status/l%d","path":"/status/l%d/a"}`, i-1, i),
			fmt.Sprintf(`{"op":"copy","from":"/status/l%d","path":"/status/l%d/b"}`, i-1, i))
	}
	patch := []byte("[" + strings.Join(ops, ",") + "]")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := applyPatch(pod, patch, "application/json-patch+json")
	runtime.ReadMemStats(&after)
	var se *statusError
	if !errors.As(err, &se) || se.code != http.StatusUnprocessableEntity && se.code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a %d-byte JSON patch doubling the document 30 times: %v, want a 422 or 413 Status", len(patch), err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 128<<20 {
		t.Fatalf("the refused copy bomb allocated %d MiB", alloc>>20)
	}
}

func TestJSONPatchCopyIsDeep(t *testing.T) {
	out, err := jsonPatch([]byte(`{"a":{"x":1,"l":[1]}}`), []byte(`[
		{"op":"copy","from":"/a","path":"/b"},
		{"op":"replace","path":"/b/x","value":2},
		{"op":"add","path":"/b/l/-","value":2},
		{"op":"copy","from":"/a","path":"/a/self"}]`))
	if err != nil {
		t.Fatal(err)
	}
	jsonEq(t, out, `{"a":{"x":1,"l":[1],"self":{"x":1,"l":[1]}},"b":{"x":2,"l":[1,2]}}`)
	if _, err := jsonPatch([]byte(`{"a":{"b":{}}}`), []byte(`[{"op":"move","from":"/a","path":"/a/b/c"}]`)); err == nil {
		t.Fatal("a move into its own child was applied")
	}
}

// The other ways a small patch can cost much: many operations (the apiserver's 10,000), each
// re-reading or re-inserting into a big part of the document.
func TestPatchWorkIsBounded(t *testing.T) {
	big := `{"list":[` + strings.Repeat(`"abcdefgh",`, 200000) + `"z"],"s":"` + strings.Repeat("y", 1<<20) + `"}`
	many := func(op string, n int) []byte {
		return []byte("[" + strings.Repeat(op+",", n-1) + op + "]")
	}
	for _, tt := range []struct {
		name  string
		patch []byte
		code  int
	}{
		{"10,001 operations", many(`{"op":"test","path":"/s","value":"y"}`, maxPatchOps+1), http.StatusRequestEntityTooLarge},
		{"10,000 inserts at the head of a long list", many(`{"op":"add","path":"/list/0","value":1}`, maxPatchOps), http.StatusUnprocessableEntity},
		{"10,000 removes at the head of a long list", many(`{"op":"remove","path":"/list/0"}`, maxPatchOps), http.StatusUnprocessableEntity},
	} {
		_, err := jsonPatch([]byte(big), tt.patch)
		var se *statusError
		if !errors.As(err, &se) || se.code != tt.code {
			t.Errorf("%s: %v, want a %d Status", tt.name, err, tt.code)
		}
	}
	// A merge patch may not make the object grow past what a body carries.
	if _, err := applyPatch([]byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c"}}`), []byte(`{"data":{"a":"`+strings.Repeat("q", maxGrowth+1)+`"}}`), "application/merge-patch+json"); err == nil {
		t.Error("a merge patch grew the object past the bound")
	}
}

// A strategic merge patch of a list merged by value (finalizers) or by key (containers) costs the
// lengths of the two lists, not their product: 50,000 finalizers into 50,000 were 1.25e9
// comparisons.
func TestStrategicMergePatchOfLongListsIsLinear(t *testing.T) {
	var have, add, ctrs []string
	for i := 0; i < 50000; i++ {
		have = append(have, fmt.Sprintf(`"f-%d"`, i))
		add = append(add, fmt.Sprintf(`"g-%d"`, i))
		ctrs = append(ctrs, fmt.Sprintf(`{"name":"c-%d","image":"i"}`, i))
	}
	doc := []byte(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","finalizers":[` + strings.Join(have, ",") + `]},"spec":{"containers":[` + strings.Join(ctrs, ",") + `]}}`)
	patch := []byte(`{"metadata":{"finalizers":[` + strings.Join(add, ",") + `]},"spec":{"containers":[` + strings.Join(ctrs, ",") + `]}}`)
	var d, p map[string]any
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(patch, &p); err != nil {
		t.Fatal(err)
	}
	w := &patchWork{}
	out, err := smpMap(d, p, reflect.TypeOf(corev1.Pod{}), w)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(out["metadata"].(map[string]any)["finalizers"].([]any)); n != 100000 {
		t.Fatalf("%d finalizers after the merge, want 100000", n)
	}
	if n := len(out["spec"].(map[string]any)["containers"].([]any)); n != 50000 {
		t.Fatalf("%d containers after the merge, want 50000", n)
	}
	if lim := int64(8 * (len(doc) + len(patch))); w.work > lim {
		t.Fatalf("the merge took %d units of work for %d bytes of document and patch", w.work, len(doc)+len(patch))
	}
}
