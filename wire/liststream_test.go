package wire

import (
	"bytes"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The streamed List is the List ListBuilder makes (JSON and protobuf), and padding is skipped.
func TestStreamedListDecodes(t *testing.T) {
	var items [][]byte
	for _, name := range []string{"a", "b"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Data: map[string]string{"k": name}}
		raw, err := EncodeProto("v1", "ConfigMap", cm)
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, raw)
	}
	for _, pad := range []int{0, 2, 3, 127, 128, 129, 130, 131, 200, 16385} {
		var msg []byte
		msg = append(msg, ProtoListMeta("42")...)
		for _, it := range items {
			_, _, m, err := DecodeProtoEnvelope(it)
			if err != nil {
				t.Fatal(err)
			}
			msg = append(append(msg, ProtoListItemHead(len(m))...), m...)
		}
		p := ProtoPadding(pad)
		if len(p) != pad {
			t.Fatalf("padding of %d is %d bytes", pad, len(p))
		}
		msg = append(msg, p...)
		body := append(append(ProtoListHead("v1", "ConfigMap", len(msg)), msg...), ProtoListTail()...)
		var l corev1.ConfigMapList
		av, kind, err := DecodeProto(body, &l)
		if err != nil || av != "v1" || kind != "ConfigMapList" || len(l.Items) != 2 || l.Items[1].Data["k"] != "b" || l.ResourceVersion != "42" {
			t.Fatalf("pad %d: %v %s %s %+v", pad, err, av, kind, l)
		}
	}
	b := &ListBuilder{Protobuf: true, APIVersion: "v1", Kind: "ConfigMap"}
	for _, it := range items {
		_ = b.Add(it)
	}
	want, _ := b.Bytes("42")
	var msg []byte
	for _, it := range items {
		_, _, m, _ := DecodeProtoEnvelope(it)
		msg = append(append(msg, ProtoListItemHead(len(m))...), m...)
	}
	msg = append(ProtoListMeta("42"), msg...)
	got := append(append(ProtoListHead("v1", "ConfigMap", len(msg)), msg...), ProtoListTail()...)
	if !bytes.Equal(got, want) {
		t.Fatalf("streamed protobuf list differs from ListBuilder's:\n%q\n%q", got, want)
	}
	js := append(append(append(JSONListHead("v1", "ConfigMap"), JSONListItem([]byte(` {"a":1} `))...), ','), `{"b":2}`...)
	js = append(js, JSONListTail("7")...)
	if string(js) != `{"kind":"ConfigMapList","apiVersion":"v1","items":[{"a":1},{"b":2}],"metadata":{"resourceVersion":"7"}}`+"\n" {
		t.Fatalf("%s", js)
	}
}
