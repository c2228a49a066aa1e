package endpointfix

import (
	"bytes"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Issue 30: after the return kubelet reports web-1 ready through the hub; the controller's slice
// that says so reaches the hub before the cloud's answer to the status write. It must pass as
// the cloud says (a watch from the cloud never gets it again), while a stale slice naming the
// dead address is still corrected; once the answer is in and the write ended, the pod retires.
func TestNewerReportOnItsWayLetsTheCloudsSlicePass(t *testing.T) {
	f := fixer(t, pod("web-1", "u1", false, "10.0.0.11"))
	stale := encode(t, slice("a", discoveryv1.AddressTypeIPv4, ep("web-1", "u1", node, true, true, false, "10.0.0.1")), true)
	written := slice("a", discoveryv1.AddressTypeIPv4, ep("web-1", "u1", node, true, true, false, "10.0.0.11"))
	written.ResourceVersion = "43" // the controller's write once the cloud has kubelet's report
	fresh := encode(t, written, true)
	if out, _ := f.view().apply(stale, f.observe); bytes.Equal(out, stale) {
		t.Fatal("offline: the stale slice passed")
	}
	f.SetOnline(true, time.Now())

	done := f.Sending("ns", "web-1") // kubelet's write of web-1 ready leaves for the cloud
	if out, changed := f.view().apply(fresh, f.observe); changed || !bytes.Equal(out, fresh) {
		e, _ := endpointOf(decodeSlice(t, out), "web-1")
		t.Fatalf("the cloud's slice saying web-1 ready was corrected (ready %v) while kubelet's newer report was on its way", *e.Conditions.Ready)
	}
	out, _ := f.view().apply(stale, f.observe)
	if e, _ := endpointOf(decodeSlice(t, out), "web-1"); e.Addresses[0] != "10.0.0.11" || *e.Conditions.Ready {
		t.Fatalf("a stale slice naming the dead address passed meanwhile: %v ready %v", e.Addresses, *e.Conditions.Ready)
	}
	f.ReportedOnline(encode(t, pod("web-1", "u1", true, "10.0.0.11"), false))
	done()
	if out, changed := f.view().apply(fresh, f.observe); changed || !bytes.Equal(out, fresh) {
		t.Fatal("after the answer: the cloud's slice was corrected")
	}
	if f.Pods() != 0 {
		t.Fatalf("still correcting %d pods once the cloud's slice agreed with kubelet's newest report", f.Pods())
	}
}

// A write that fails leaves the correction as it was.
func TestFailedWriteKeepsTheCorrection(t *testing.T) {
	f := fixer(t, pod("web-1", "u1", false, "10.0.0.11"))
	f.SetOnline(true, time.Now())
	cloud := encode(t, slice("a", discoveryv1.AddressTypeIPv4, ep("web-1", "u1", node, true, true, false, "10.0.0.11")), false)
	f.view().apply(cloud, f.observe)
	done := f.Sending("ns", "web-1")
	// The very slice served corrected before the write left is the cloud's old word: it does not
	// flap to the cloud's readiness meanwhile (an open watch of the shared store, a fresh list).
	if out, changed := f.view().apply(cloud, f.observe); !changed || bytes.Equal(out, cloud) {
		t.Fatal("while the write was on its way the slice served corrected before passed")
	}
	done()
	if out, changed := f.view().apply(cloud, f.observe); !changed || bytes.Equal(out, cloud) {
		t.Fatal("after a failed write the cloud's old word on web-1 passed")
	}
	if f.Sending("ns", "web-9") == nil {
		t.Fatal("nil done for a pod not corrected")
	}
}

// v1 Endpoints the same way, and a watch of the shared store gets the cloud's word as MODIFIED.
func TestNewerReportOnItsWayEndpointsAndWatches(t *testing.T) {
	f := fixer(t, pod("web-1", "u1", false, "10.0.0.11"))
	f.SetOnline(true, time.Now())
	e := &corev1.Endpoints{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Endpoints"}, ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "10.0.0.11", NodeName: ptr(node),
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "web-1", UID: "u1"}}}}}}
	raw := encode(t, e, false)
	newer := slice("a", discoveryv1.AddressTypeIPv4, ep("web-1", "u1", node, true, true, false, "10.0.0.11"))
	newer.ResourceVersion = "43"
	cloud := encode(t, newer, false)
	w := f.NewWatch()
	w.Served()
	done := f.Sending("ns", "web-1")
	defer done()
	if out, changed := f.view().apply(raw, f.observe); changed || !bytes.Equal(out, raw) {
		t.Fatal("v1 Endpoints: the cloud's ready address was corrected while kubelet's newer report was on its way")
	}
	fn, _ := w.Pass()
	if fn == nil {
		t.Fatal("no pass after the write left")
	}
	if out, moved := fn(cloud); !moved || !bytes.Equal(out, cloud) {
		t.Fatal("an open watch was not sent the cloud's slice")
	}
}

func endpointOf(s *discoveryv1.EndpointSlice, pod string) (discoveryv1.Endpoint, bool) {
	for _, e := range s.Endpoints {
		if e.TargetRef != nil && e.TargetRef.Name == pod {
			return e, true
		}
	}
	return discoveryv1.Endpoint{}, false
}
