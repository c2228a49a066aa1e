package cache

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"nodehub/wire"
)

// BenchmarkOfflineList110Pods reads the node's 110 pods back as the offline proxy does.
func BenchmarkOfflineList110Pods(b *testing.B) {
	s, err := Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	r := Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}
	for i := 0; i < 110; i++ {
		p := pod(fmt.Sprintf("pod-%03d", i), "edge-1", fmt.Sprint(i+1), map[string]string{"app": "x"})
		p.Spec.Containers = []corev1.Container{{Name: "c", Image: "img", Env: []corev1.EnvVar{{Name: "A", Value: fmt.Sprintf("%0200d", i)}}}}
		raw, _ := wire.EncodeProto("v1", "Pod", p)
		m, _ := wire.ExtractMeta(raw, "pods")
		h := headerFor(m, wire.MediaProtobuf)
		if err := s.Put(Key{Resource: r, Namespace: "default", Name: m.Name}, &h, raw); err != nil {
			b.Fatal(err)
		}
	}
	s.PutList(r, ListRecord{FieldSelector: "spec.nodeName=edge-1", Complete: true, APIVersion: "v1", Kind: "Pod"})
	sel, _ := wire.NewSelector("", "", "spec.nodeName=edge-1")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n := 0
		if _, err := s.EachInList(r, sel, func(Item) error { n++; return nil }); err != nil || n != 110 {
			b.Fatal(n, err)
		}
	}
}
