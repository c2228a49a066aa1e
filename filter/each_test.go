package filter

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/wire"
)

// Every filter, on an object it changes (or drops), in JSON and protobuf, as a single object, as
// an item of a List and as a watch event.
func TestEachFilterOnObjectsListsAndWatchesInBothFormats(t *testing.T) {
	name, port := "https", int32(443)
	node2, node1 := "edge-2", "edge-1"
	cases := []struct {
		filter, component, path, listKind string
		obj                               wire.Typed
		check                             func(wire.Typed) bool // nil: the object is dropped
	}{
		{"masterservice", "kubelet", "/api/v1/services", "ServiceList", service("default", "kubernetes", "ClusterIP", nil),
			func(o wire.Typed) bool { return o.(*corev1.Service).Spec.ClusterIP == "169.254.2.1" }},
		{"servicetopology", "kube-proxy", "/apis/discovery.k8s.io/v1/endpointslices", "EndpointSliceList",
			&discoveryv1.EndpointSlice{TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
				ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: "host-x", Labels: map[string]string{discoveryv1.LabelServiceName: "host"}},
				AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, NodeName: &node1}, {Addresses: []string{"10.0.0.2"}, NodeName: &node2}}},
			func(o wire.Typed) bool { return len(o.(*discoveryv1.EndpointSlice).Endpoints) == 1 }},
		{"discardcloudservice", "kube-proxy", "/api/v1/services", "ServiceList", service("ns", "lb", "LoadBalancer", map[string]string{"svc.openyurt.io/discard": "true"}), nil},
		{"nodeportisolation", "kube-proxy", "/api/v1/services", "ServiceList", service("ns", "np", "NodePort", map[string]string{listenAnnotation: "-pool-a"}), nil},
		{"forwardkubesvctraffic", "kube-proxy", "/apis/discovery.k8s.io/v1/endpointslices", "EndpointSliceList",
			&discoveryv1.EndpointSlice{TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
				ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "kubernetes", Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
				AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}}, Ports: []discoveryv1.EndpointPort{{Name: &name, Port: &port}}},
			func(o wire.Typed) bool {
				return o.(*discoveryv1.EndpointSlice).Endpoints[0].Addresses[0] == "169.254.2.1"
			}},
		{"inclusterconfig", "kubelet", "/api/v1/configmaps", "ConfigMapList",
			&corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy"},
				Data: map[string]string{"config.conf": "clientConnection:\n  kubeconfig: /x\n"}},
			func(o wire.Typed) bool {
				return o.(*corev1.ConfigMap).Data["config.conf"] == "clientConnection:\n  #kubeconfig: /x\n"
			}},
		{"serviceenvupdater", "kubelet", "/api/v1/pods", "PodList",
			&corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p"},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Env: []corev1.EnvVar{{Name: "KUBERNETES_SERVICE_HOST", Value: "x"}}}}}},
			func(o wire.Typed) bool { return o.(*corev1.Pod).Spec.Containers[0].Env[0].Value == "169.254.2.1" }},
	}
	topo := fakeTopology{keys: map[string]string{"ns/host": "kubernetes.io/hostname"}}
	s := set(t, Config{NodeName: "edge-1", NodePool: "pool-a", Topology: topo})
	for _, tc := range cases {
		c := chain(t, s, tc.component, tc.path)
		if c == nil || !c.Uses(tc.filter) {
			t.Fatalf("%s: not in the chain for %s %s", tc.filter, tc.component, tc.path)
		}
		for _, format := range []string{"json", "protobuf"} {
			m := media(format)
			raw := encodeBoth(t, tc.obj)[format]
			check := func(where string, out []byte) {
				t.Helper()
				obj, err := wire.Decode(bytes.TrimSpace(out))
				if err != nil || !tc.check(obj) {
					t.Errorf("%s %s %s: not filtered (%v)", tc.filter, format, where, err)
				}
			}
			// A single object.
			out, err := c.Body(raw, m, false)
			if tc.check == nil {
				if err != ErrDropped {
					t.Errorf("%s %s object: want dropped, got %v", tc.filter, format, err)
				}
			} else if err != nil {
				t.Fatal(err)
			} else {
				check("object", out)
			}
			// An item of a List.
			list := listOf(t, tc.obj, tc.listKind, format == "protobuf")
			out, err = c.Body(list, m, true)
			if err != nil {
				t.Fatal(err)
			}
			var items [][]byte
			sp := wire.NewListSplitter(m, wire.ListHandler{Item: func(b []byte) error { items = append(items, b); return nil }})
			sp.Write(out)
			if err := sp.Close(); err != nil {
				t.Fatal(err)
			}
			if tc.check == nil {
				if len(items) != 0 {
					t.Errorf("%s %s list: not dropped", tc.filter, format)
				}
			} else if len(items) != 1 {
				t.Errorf("%s %s list: %d items", tc.filter, format, len(items))
			} else {
				check("list item", items[0])
			}
			// A watch event.
			frame := wire.EncodeJSONWatchEvent
			if format == "protobuf" {
				frame = wire.EncodeProtoWatchEvent
			}
			got, _ := io.ReadAll(c.Watch(io.NopCloser(bytes.NewReader(frame(wire.WatchEvent{Type: wire.EventAdded, Object: raw}))), m))
			var evs []wire.WatchEvent
			wire.NewWatchSplitter(m, func(ev wire.WatchEvent) error { evs = append(evs, ev); return nil }).Write(got)
			switch {
			case len(evs) != 1:
				t.Errorf("%s %s watch: %d events", tc.filter, format, len(evs))
			case tc.check == nil && evs[0].Type != wire.EventDeleted:
				t.Errorf("%s %s watch: dropped object came as %s", tc.filter, format, evs[0].Type)
			case tc.check != nil:
				check("watch event", evs[0].Object)
			}
		}
	}
}

// listOf wraps one object in a List as the apiserver writes it.
func listOf(t *testing.T, obj wire.Typed, listKind string, protobuf bool) []byte {
	t.Helper()
	av, _ := obj.GetObjectKind().GroupVersionKind().ToAPIVersionAndKind()
	b := &wire.ListBuilder{Protobuf: protobuf, APIVersion: av, Kind: listKind[:len(listKind)-4]}
	raw, err := wire.Encode(obj, protobuf)
	if err != nil {
		t.Fatal(err)
	}
	if !protobuf { // apiserver lists carry items without kind and apiVersion
		var m map[string]any
		json.Unmarshal(raw, &m)
		delete(m, "kind")
		delete(m, "apiVersion")
		raw, _ = json.Marshal(m)
	}
	if err := b.Add(raw); err != nil {
		t.Fatal(err)
	}
	out, err := b.Bytes("7")
	if err != nil {
		t.Fatal(err)
	}
	return out
}
