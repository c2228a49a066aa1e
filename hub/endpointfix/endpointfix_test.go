package endpointfix

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"nodehub/wire"
)

const node = "edge-1"

func ptr[T any](v T) *T { return &v }

func pod(name, uid string, ready bool, ips ...string) *corev1.Pod {
	p := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)},
		Spec:       corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0]
	}
	return p
}

func ep(pod, uid, nodeName string, ready, serving, terminating bool, addrs ...string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: addrs, NodeName: ptr(nodeName),
		Conditions: discoveryv1.EndpointConditions{Ready: ptr(ready), Serving: ptr(serving), Terminating: ptr(terminating)},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: pod, UID: types.UID(uid)}}
}

func slice(name string, t discoveryv1.AddressType, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: "42", Labels: map[string]string{discoveryv1.LabelServiceName: "svc"}},
		AddressType: t, Endpoints: eps, Ports: []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(80))}}}
}

func wireEncode(obj wire.Typed, pb bool) ([]byte, error) { return wire.Encode(obj, pb) }

func encode(t *testing.T, obj wire.Typed, pb bool) []byte {
	t.Helper()
	b, err := wire.Encode(obj, pb)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeSlice(t *testing.T, raw []byte) *discoveryv1.EndpointSlice {
	t.Helper()
	o, err := wire.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	return o.(*discoveryv1.EndpointSlice)
}

// The derivation rules, as the EndpointSlice controller's podToEndpoint and ShouldPodBeInEndpoints
// have them, on one endpoint.
func TestFixFollowsTheControllersRules(t *testing.T) {
	terminating := pod("p", "u1", true, "10.0.0.9")
	terminating.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
	failed := pod("p", "u1", false, "10.0.0.9")
	failed.Status.Phase = corev1.PodFailed
	dual := pod("p", "u1", true, "10.0.0.9", "fd00::9")
	cases := []struct {
		name   string
		pod    Pod
		t      discoveryv1.AddressType
		in     discoveryv1.Endpoint
		want   discoveryv1.Endpoint
		change bool
	}{
		{"new IP, ready", FromPod(pod("p", "u1", true, "10.0.0.9")), discoveryv1.AddressTypeIPv4,
			ep("p", "u1", node, true, true, false, "10.0.0.1"), ep("p", "u1", node, true, true, false, "10.0.0.9"), true},
		{"new IP, not ready yet", FromPod(pod("p", "u1", false, "10.0.0.9")), discoveryv1.AddressTypeIPv4,
			ep("p", "u1", node, true, true, false, "10.0.0.1"), ep("p", "u1", node, false, false, false, "10.0.0.9"), true},
		{"as the slice says already", FromPod(pod("p", "u1", true, "10.0.0.1")), discoveryv1.AddressTypeIPv4,
			ep("p", "u1", node, true, true, false, "10.0.0.1"), ep("p", "u1", node, true, true, false, "10.0.0.1"), false},
		{"terminating: serving, not ready", FromPod(terminating), discoveryv1.AddressTypeIPv4,
			ep("p", "u1", node, true, true, false, "10.0.0.9"), ep("p", "u1", node, false, true, true, "10.0.0.9"), true},
		{"publishNotReadyAddresses kept", FromPod(pod("p", "u1", false, "10.0.0.9")), discoveryv1.AddressTypeIPv4,
			ep("p", "u1", node, true, false, false, "10.0.0.1"), ep("p", "u1", node, true, false, false, "10.0.0.9"), true},
		{"failed: not ready, address kept", FromPod(failed), discoveryv1.AddressTypeIPv4,
			ep("p", "u1", node, true, true, false, "10.0.0.9"), ep("p", "u1", node, false, false, false, "10.0.0.9"), true},
		{"gone: not ready", Pod{Gone: true}, discoveryv1.AddressTypeIPv4,
			ep("p", "u1", node, true, true, false, "10.0.0.1"), ep("p", "u1", node, false, false, false, "10.0.0.1"), true},
		{"no IP yet: old address, not ready", FromPod(pod("p", "u1", false)), discoveryv1.AddressTypeIPv4,
			ep("p", "u1", node, true, true, false, "10.0.0.1"), ep("p", "u1", node, false, false, false, "10.0.0.1"), true},
		{"IPv6 slice of a dual-stack pod", FromPod(dual), discoveryv1.AddressTypeIPv6,
			ep("p", "u1", node, true, true, false, "fd00::1"), ep("p", "u1", node, true, true, false, "fd00::9"), true},
		{"IPv4 slice of a dual-stack pod", FromPod(dual), discoveryv1.AddressTypeIPv4,
			ep("p", "u1", node, false, false, false, "10.0.0.1"), ep("p", "u1", node, true, true, false, "10.0.0.9"), true},
	}
	for _, tc := range cases {
		got := tc.in
		if changed := tc.pod.fix(&got, tc.t); changed != tc.change {
			t.Errorf("%s: changed %v, want %v", tc.name, changed, tc.change)
		}
		if !slices.Equal(got.Addresses, tc.want.Addresses) || *got.Conditions.Ready != *tc.want.Conditions.Ready ||
			*got.Conditions.Serving != *tc.want.Conditions.Serving || *got.Conditions.Terminating != *tc.want.Conditions.Terminating {
			t.Errorf("%s: got %v %v/%v/%v, want %v %v/%v/%v", tc.name, got.Addresses, *got.Conditions.Ready, *got.Conditions.Serving, *got.Conditions.Terminating,
				tc.want.Addresses, *tc.want.Conditions.Ready, *tc.want.Conditions.Serving, *tc.want.Conditions.Terminating)
		}
	}
}

func fixer(t *testing.T, pods ...*corev1.Pod) *Fixer {
	f := New(node, 0, nil)
	for _, p := range pods {
		f.Reported(encode(t, p, false))
	}
	return f
}

// A slice that names the node's reported pod is corrected in its own format; other nodes'
// endpoints stay as they were; slices that need nothing pass as the very bytes.
func TestSlicesCorrectedOnlyWhereTheyChange(t *testing.T) {
	f := fixer(t, pod("web-1", "u1", true, "10.0.0.9"))
	mixed := slice("web-abc", discoveryv1.AddressTypeIPv4,
		ep("web-1", "u1", node, true, true, false, "10.0.0.1"), ep("web-2", "u2", "edge-2", true, true, false, "10.0.1.1"))
	other := slice("db-abc", discoveryv1.AddressTypeIPv4, ep("db-1", "u3", "edge-2", true, true, false, "10.0.1.2"))
	right := slice("web-def", discoveryv1.AddressTypeIPv4, ep("web-1", "u1", node, true, true, false, "10.0.0.9"))
	for _, pb := range []bool{false, true} {
		w := f.NewWatch()
		fn := w.Served()
		raw := encode(t, mixed, pb)
		out := fn(raw)
		if bytes.Equal(out, raw) || wire.IsProtobuf(out) != pb {
			t.Fatalf("protobuf=%v: not corrected in its format", pb)
		}
		got := decodeSlice(t, out)
		if got.Endpoints[0].Addresses[0] != "10.0.0.9" || got.Endpoints[1].Addresses[0] != "10.0.1.1" || got.ResourceVersion != "42" || got.Ports[0].Name == nil {
			t.Fatalf("protobuf=%v: corrected slice %+v", pb, got)
		}
		// Everything but the endpoint is as it was: corrected back, it is the cloud's bytes.
		got.Endpoints[0] = mixed.Endpoints[0]
		if !bytes.Equal(encode(t, got, pb), raw) {
			t.Fatalf("protobuf=%v: more than the endpoint changed", pb)
		}
		for _, s := range []*discoveryv1.EndpointSlice{other, right} {
			raw := encode(t, s, pb)
			if out := fn(raw); &out[0] != &raw[0] || len(out) != len(raw) {
				t.Fatalf("protobuf=%v: %s not passed through as its bytes", pb, s.Name)
			}
		}
	}
	if f.Corrected() != 1 {
		t.Fatalf("corrected %d endpoints, want 1", f.Corrected())
	}
}

// A watch's first pass sends what is corrected; later passes only what a report changed.
func TestWatchPassesSendWhatChanged(t *testing.T) {
	f := fixer(t, pod("web-1", "u1", false, "10.0.0.9"))
	a := encode(t, slice("a", discoveryv1.AddressTypeIPv4, ep("web-1", "u1", node, true, true, false, "10.0.0.1")), true)
	b := encode(t, slice("b", discoveryv1.AddressTypeIPv4, ep("api-1", "u5", node, true, true, false, "10.0.0.5")), true)
	w := f.NewWatch()
	fn, next := w.Pass()
	if fn == nil {
		t.Fatal("first pass: nothing to look at")
	}
	if _, moved := fn(a); !moved {
		t.Fatal("first pass: corrected slice not sent")
	}
	if _, moved := fn(b); moved {
		t.Fatal("first pass: untouched slice sent")
	}
	if fn, _ := w.Pass(); fn != nil {
		t.Fatal("second pass without a change: not nil")
	}
	f.Reported(encode(t, pod("web-1", "u1", true, "10.0.0.9"), false))
	select {
	case <-next:
	default:
		t.Fatal("a report did not wake the watch")
	}
	fn, _ = w.Pass()
	out, moved := fn(a)
	if !moved || !*decodeSlice(t, out).Endpoints[0].Conditions.Ready {
		t.Fatal("ready report not sent")
	}
	if _, moved := fn(b); moved {
		t.Fatal("untouched slice sent")
	}
	f.Reported(encode(t, pod("api-1", "u5", true, "10.0.0.5"), false)) // says what the slice says
	fn, _ = w.Pass()
	if _, moved := fn(b); moved {
		t.Fatal("a report that changes nothing sent")
	}
}

// After the return: a pod stays corrected until the cloud has kubelet's report and a slice from
// the cloud says it too; at most Bound.
func TestReturnRetiresWhenTheCloudCaughtUp(t *testing.T) {
	f := fixer(t, pod("web-1", "u1", true, "10.0.0.9"), pod("db-1", "u2", true, "10.0.0.8"))
	stale := encode(t, slice("a", discoveryv1.AddressTypeIPv4, ep("web-1", "u1", node, true, true, false, "10.0.0.1")), false)
	fresh := encode(t, slice("a", discoveryv1.AddressTypeIPv4, ep("web-1", "u1", node, true, true, false, "10.0.0.9")), false)
	apply := func(raw []byte) []byte { return f.NewWatch().Served()(raw) }
	apply(stale)
	now := time.Now()
	f.SetOnline(true, now)
	if out := apply(stale); bytes.Equal(out, stale) {
		t.Fatal("online before the cloud caught up: stale slice passed")
	}
	f.ReportedOnline(encode(t, pod("web-1", "u1", true, "10.0.0.9"), false))
	if f.Pods() != 2 {
		t.Fatal("retired before a slice from the cloud said it")
	}
	// The cloud's slice now says it (through the chain: observed).
	if out, v := f.view().apply(fresh, f.observe); v || !bytes.Equal(out, fresh) {
		t.Fatal("a right slice was changed")
	}
	if f.Pods() != 1 {
		t.Fatalf("pods corrected %d, want 1 (web-1 retired)", f.Pods())
	}
	f.expire(now.Add(DefaultBound - time.Second))
	if f.Pods() != 1 {
		t.Fatal("expired early")
	}
	f.expire(now.Add(DefaultBound))
	if f.Active() {
		t.Fatal("not expired after the bound")
	}
}

// A pod the slices place on this node that kubelet does not run is not ready while offline; the
// cloud wins for it once back.
func TestGonePodsNotReadyUntilTheReturn(t *testing.T) {
	f := fixer(t)
	f.Gone("ns", "web-9", "u9")
	raw := encode(t, slice("a", discoveryv1.AddressTypeIPv4, ep("web-9", "u9", node, true, true, false, "10.0.0.9")), true)
	out := f.NewWatch().Served()(raw)
	if e := decodeSlice(t, out).Endpoints[0]; *e.Conditions.Ready || *e.Conditions.Serving || e.Addresses[0] != "10.0.0.9" {
		t.Fatalf("gone pod's endpoint %+v", e)
	}
	f.Reported(encode(t, pod("web-9", "u9", true, "10.0.0.9"), false)) // kubelet runs it after all
	if fn := f.NewWatch().Served(); fn != nil && !bytes.Equal(fn(raw), raw) {
		t.Fatal("a reported pod stayed gone")
	}
	f.Gone("ns", "web-8", "u8")
	f.SetOnline(true, time.Now())
	if f.Pods() != 1 {
		t.Fatalf("%d pods corrected online, want 1 (the gone one dropped)", f.Pods())
	}
}

// The pool's other hubs share their reports: each counts only for endpoints on its own node.
func TestForeignReportsOnlyForTheirNode(t *testing.T) {
	a := New("edge-a", 0, nil)
	other := pod("web-2", "u2", true, "10.0.2.9")
	other.Spec.NodeName = "edge-b"
	b := New("edge-b", 0, nil)
	b.Reported(encode(t, other, false))
	liar := pod("web-3", "u3", false, "10.0.3.9") // edge-b speaking for edge-c's pod
	liar.Spec.NodeName = "edge-c"
	lie, _ := json.Marshal([]Pod{FromPod(liar)})
	a.SetForeign(map[string][]byte{"edge-b": b.Shared(), "edge-c-by-b": lie, "edge-a": lie})
	raw := encode(t, slice("s", discoveryv1.AddressTypeIPv4,
		ep("web-2", "u2", "edge-b", true, true, false, "10.0.2.1"),
		ep("web-3", "u3", "edge-c", true, true, false, "10.0.3.1"),
		ep("web-2", "u2", "edge-a", true, true, false, "10.0.9.1")), false)
	got := decodeSlice(t, a.NewWatch().Served()(raw))
	if got.Endpoints[0].Addresses[0] != "10.0.2.9" || got.Endpoints[1].Addresses[0] != "10.0.3.1" || got.Endpoints[2].Addresses[0] != "10.0.9.1" {
		t.Fatalf("foreign reports applied as %v %v %v", got.Endpoints[0].Addresses, got.Endpoints[1].Addresses, got.Endpoints[2].Addresses)
	}
	if a.Pods() != 0 || a.Corrected() != 0 {
		t.Fatal("another node's pods counted as this node's")
	}
	a.SetForeign(nil)
	if a.Active() {
		t.Fatal("foreign reports kept after the pool dropped them")
	}
}

// v1 Endpoints the same way: a reported pod's address takes its new IP and moves between
// addresses and notReadyAddresses; other nodes' addresses stay.
func TestV1EndpointsFollowReports(t *testing.T) {
	f := fixer(t, pod("web-1", "u1", false, "10.0.0.9"))
	ref := func(name, uid string) *corev1.ObjectReference {
		return &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: name, UID: types.UID(uid)}
	}
	e := &corev1.Endpoints{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Endpoints"}, ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: "10.0.0.1", NodeName: ptr(node), TargetRef: ref("web-1", "u1")}, {IP: "10.0.1.1", NodeName: ptr("edge-2"), TargetRef: ref("web-2", "u2")}},
			Ports:     []corev1.EndpointPort{{Port: 80}}}}}
	for _, pb := range []bool{false, true} {
		raw := encode(t, e, pb)
		out := f.NewWatch().Served()(raw)
		o, err := wire.Decode(out)
		if err != nil {
			t.Fatal(err)
		}
		got := o.(*corev1.Endpoints).Subsets[0]
		if len(got.Addresses) != 1 || got.Addresses[0].IP != "10.0.1.1" || len(got.NotReadyAddresses) != 1 || got.NotReadyAddresses[0].IP != "10.0.0.9" {
			t.Fatalf("protobuf=%v: %+v", pb, got)
		}
	}
	f.Reported(encode(t, pod("web-1", "u1", true, "10.0.0.9"), false))
	o, _ := wire.Decode(f.NewWatch().Served()(encode(t, e, false)))
	if got := o.(*corev1.Endpoints).Subsets[0]; len(got.Addresses) != 2 || got.Addresses[0].IP != "10.0.0.9" {
		t.Fatalf("ready: %+v", got)
	}
	other := &corev1.Endpoints{TypeMeta: e.TypeMeta, ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"},
		Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "10.0.1.2", NodeName: ptr("edge-2"), TargetRef: ref("db-1", "u3")}}}}}
	raw := encode(t, other, true)
	if out := f.NewWatch().Served()(raw); &out[0] != &raw[0] {
		t.Fatal("untouched Endpoints not passed as their bytes")
	}
}
