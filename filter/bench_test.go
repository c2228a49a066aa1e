package filter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/wire"
)

// slices1000 is a 1,000-item EndpointSlice list with default/kubernetes among them (the one
// forwardkubesvctraffic rewrites), in JSON and protobuf, and the same items as a watch stream.
func slices1000(b *testing.B, protobuf bool) (list, stream []byte) {
	l := &discoveryv1.EndpointSliceList{TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSliceList"}, ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
	port, name := int32(8080), "http"
	for i := 0; i < 1000; i++ {
		ns, svc := "ns", fmt.Sprintf("svc-%d", i)
		if i == 500 {
			ns, svc = "default", "kubernetes"
		}
		s := discoveryv1.EndpointSlice{TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
			ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: svc + "-abcde", ResourceVersion: fmt.Sprint(i + 2), Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
			AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Name: &name, Port: &port}}}
		for j := 0; j < 10; j++ {
			node := fmt.Sprintf("node-%d", j)
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.%d.%d.1", i%250, j)}, NodeName: &node})
		}
		obj, err := wire.Encode(&s, protobuf)
		if err != nil {
			b.Fatal(err)
		}
		frame := wire.EncodeJSONWatchEvent
		if protobuf {
			frame = wire.EncodeProtoWatchEvent
		}
		stream = append(stream, frame(wire.WatchEvent{Type: wire.EventModified, Object: obj})...)
		s.TypeMeta = metav1.TypeMeta{}
		l.Items = append(l.Items, s)
	}
	var err error
	if protobuf {
		list, err = wire.EncodeProto("discovery.k8s.io/v1", "EndpointSliceList", l)
	} else {
		list, err = json.Marshal(l)
	}
	if err != nil {
		b.Fatal(err)
	}
	return list, stream
}

func benchChain(b *testing.B, component string) *Chain {
	s, _ := New(Config{Enabled: true, MasterServiceHost: "169.254.2.1", MasterServicePort: 10268})
	return chain(nil, s, component, "/apis/discovery.k8s.io/v1/endpointslices")
}

func BenchmarkFilterList1000Slices(b *testing.B) {
	for _, pb := range []bool{false, true} {
		list, _ := slices1000(b, pb)
		m := media(map[bool]string{false: "json", true: "protobuf"}[pb])
		c := benchChain(b, "kube-proxy")
		b.Run(m.Type, func(b *testing.B) {
			b.SetBytes(int64(len(list)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := c.Body(list, m, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkFilterWatch1000Events(b *testing.B) {
	for _, pb := range []bool{false, true} {
		_, stream := slices1000(b, pb)
		m := media(map[bool]string{false: "json", true: "protobuf"}[pb])
		c := benchChain(b, "kube-proxy")
		b.Run(m.Type, func(b *testing.B) {
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := io.Copy(io.Discard, c.Watch(io.NopCloser(bytes.NewReader(stream)), m)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// With no filter approving the request the hub does not touch the body at all (Set.For is nil):
// the cost over the copy the proxy makes anyway is the chain lookup. The copy here moves the bytes
// through a 32 KiB buffer into a sink, as the proxy's copy to the client's socket does.
func BenchmarkNoFilterList1000Slices(b *testing.B) {
	list, _ := slices1000(b, true)
	s, _ := New(Config{Enabled: true, MasterServiceHost: "169.254.2.1", MasterServicePort: 10268})
	ri, _ := wire.ParseURL("GET", mustURL("/apis/discovery.k8s.io/v1/endpointslices"))
	ri.Component = "some-agent"
	buf := make([]byte, 32<<10)
	var sink sinkWriter
	copyList := func() {
		if _, err := io.CopyBuffer(&sink, readerOnly{bytes.NewReader(list)}, buf); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("plain-copy", func(b *testing.B) {
		b.SetBytes(int64(len(list)))
		for i := 0; i < b.N; i++ {
			copyList()
		}
	})
	b.Run("chain-lookup+copy", func(b *testing.B) {
		b.SetBytes(int64(len(list)))
		for i := 0; i < b.N; i++ {
			if s.For(ri) != nil {
				b.Fatal("a chain for a component no filter serves")
			}
			copyList()
		}
	})
}

type readerOnly struct{ io.Reader }

// sinkWriter copies what it is given into a socket-buffer-sized slice.
type sinkWriter struct{ dst [32 << 10]byte }

func (w *sinkWriter) Write(p []byte) (int, error) { return copy(w.dst[:], p), nil }
