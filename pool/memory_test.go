package pool

import (
	"fmt"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/wire"
)

// The store costs about the raw size of its objects: what it adds per object (metadata for
// selectors, the map entry) is measured here for 1,000 EndpointSlices of 10 endpoints.
func TestStoreMemoryIsAboutTheRawObjects(t *testing.T) {
	res := Resource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}
	raws := make([][]byte, 1000)
	var raw int64
	for i := range raws {
		s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc-%04d-x", i), Namespace: "profile",
			ResourceVersion: fmt.Sprint(1000 + i), UID: "0f3c1c2e-1111-2222-3333-444455556666",
			Labels: map[string]string{discoveryv1.LabelServiceName: fmt.Sprintf("svc-%04d", i), discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
			AddressType: discoveryv1.AddressTypeIPv4}
		for j := 0; j < 10; j++ {
			node := "edge-1"
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.%d.%d.%d", i%250, j, i/250)}, NodeName: &node,
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "profile", Name: fmt.Sprintf("pod-%d-%d-abcdefgh", i, j)}})
		}
		b, err := wire.EncodeProto("discovery.k8s.io/v1", "EndpointSlice", s)
		if err != nil {
			t.Fatal(err)
		}
		raws[i], raw = b, raw+int64(len(b))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	st := NewStore(res)
	items := make([]*object, len(raws))
	for i, r := range raws {
		o, err := newObject(r, res)
		if err != nil {
			t.Fatal(err)
		}
		items[i] = o
	}
	st.replace(items, 5000, "discovery.k8s.io/v1", "EndpointSlice")
	items = nil
	runtime.GC()
	runtime.ReadMemStats(&after)
	added := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("1,000 slices: raw %d KiB (held by the test too); the store adds %d KiB for metadata and index (%d B per object)",
		raw/1024, added/1024, added/int64(len(raws)))
	if added > raw {
		t.Errorf("the store adds %d bytes over objects of %d bytes", added, raw)
	}
	runtime.KeepAlive(st)
	runtime.KeepAlive(raws)
}
