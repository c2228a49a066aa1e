package local

import (
	"encoding/json"
	"reflect"
	"testing"
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
