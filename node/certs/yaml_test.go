package certs

import (
	"reflect"
	"testing"
)

func TestParseYAMLKubeconfigs(t *testing.T) {
	kubeadm := `apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: LS0tLS1CRUdJTg==
    server: https://10.0.0.1:6443  # the control plane
  name: kubernetes
contexts:
- context:
    cluster: kubernetes
    user: "system:node:edge-1"
  name: default
current-context: default
kind: Config
preferences: {}
users:
- name: 'system:node:edge-1'
  user:
    client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem
    client-key: /var/lib/kubelet/pki/kubelet-client-current.pem
`
	v, err := parseYAML([]byte(kubeadm))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"apiVersion": "v1", "kind": "Config", "current-context": "default", "preferences": map[string]any{},
		"clusters": []any{map[string]any{"name": "kubernetes", "cluster": map[string]any{"certificate-authority-data": "LS0tLS1CRUdJTg==", "server": "https://10.0.0.1:6443"}}},
		"contexts": []any{map[string]any{"name": "default", "context": map[string]any{"cluster": "kubernetes", "user": "system:node:edge-1"}}},
		"users": []any{map[string]any{"name": "system:node:edge-1", "user": map[string]any{
			"client-certificate": "/var/lib/kubelet/pki/kubelet-client-current.pem", "client-key": "/var/lib/kubelet/pki/kubelet-client-current.pem"}}},
	}
	if !reflect.DeepEqual(v, want) {
		t.Fatalf("got %#v", v)
	}
	// Sequences indented under their key, as kubectl writes them.
	v, err = parseYAML([]byte("users:\n  - name: a\n    user:\n      token: x\n"))
	if err != nil || !reflect.DeepEqual(v, map[string]any{"users": []any{map[string]any{"name": "a", "user": map[string]any{"token": "x"}}}}) {
		t.Fatalf("indented sequence: %#v %v", v, err)
	}
	if v, err = parseYAML([]byte(`{"kind":"Config","users":[]}`)); err != nil || v.(map[string]any)["kind"] != "Config" {
		t.Fatalf("JSON kubeconfig: %v %v", v, err)
	}
	v, err = parseYAML([]byte(`clusters: [{name: hub, cluster: {server: "http://127.0.0.1:1", x: [a, 'b c']}}]` + "\n"))
	if err != nil || !reflect.DeepEqual(v, map[string]any{"clusters": []any{map[string]any{"name": "hub", "cluster": map[string]any{"server": "http://127.0.0.1:1", "x": []any{"a", "b c"}}}}}) {
		t.Fatalf("flow style: %#v %v", v, err)
	}
	if v, err = parseYAML([]byte("server: https://h:6443\n")); err != nil || v.(map[string]any)["server"] != "https://h:6443" {
		t.Fatalf("plain URL: %v %v", v, err)
	}
	for _, bad := range []string{"a: |\n  x\n", "a: &x 1\n", "a: {b: 1\n", "\tkey: v\n", "just text\n"} {
		if _, err := parseYAML([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func FuzzParseYAML(f *testing.F) {
	f.Add([]byte("a:\n- b: c\n  d: [e, {f: 'g'}]\n"))
	f.Add([]byte(`{"k":"v"}`))
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = parseYAML(b) })
}
