package endpointfix

import (
	"bytes"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// Issue 30: after the return, the cloud's newer slice (resourceVersion 45) says what kubelet
// reported and the correction ends; a route still holding the slice from before the outage (the
// shared store, whose watch of the cloud starts again a moment later: 42) must not serve its
// dead address: the older copy stays corrected, the cloud's copies from 45 on pass as they are,
// and a lost link ends that too.
func TestEndedCorrectionStillCorrectsOlderCopies(t *testing.T) {
	f := fixer(t, pod("web-0", "u0", true, "10.0.0.20"))
	old := encode(t, slice("a", discoveryv1.AddressTypeIPv4, ep("web-0", "u0", node, true, true, false, "10.0.0.10")), true)
	agreeing := slice("a", discoveryv1.AddressTypeIPv4, ep("web-0", "u0", node, true, true, false, "10.0.0.20"))
	agreeing.ResourceVersion = "45"
	fresh := encode(t, agreeing, true)
	if _, changed := f.view().apply(old, f.observe); !changed {
		t.Fatal("offline: the slice naming the dead address passed")
	}
	f.SetOnline(true, time.Now())
	f.ReportedOnline(encode(t, pod("web-0", "u0", true, "10.0.0.20"), false))
	if out, changed := f.view().apply(fresh, f.observe); changed || !bytes.Equal(out, fresh) {
		t.Fatal("the cloud's slice agreeing with kubelet was corrected")
	}
	if f.Pods() != 0 {
		t.Fatalf("the correction did not end: %d pods", f.Pods())
	}
	out, changed := f.view().apply(old, f.observe)
	if e, _ := endpointOf(decodeSlice(t, out), "web-0"); !changed || e.Addresses[0] != "10.0.0.20" {
		t.Fatalf("after the correction ended, a copy older than the cloud's agreeing one was served with %v", e.Addresses)
	}
	newer := slice("a", discoveryv1.AddressTypeIPv4, ep("web-0", "u0", node, false, false, true, "10.0.0.20"))
	newer.ResourceVersion = "50" // the cloud moves on: web-0 terminating
	if raw := encode(t, newer, false); func() bool { out, _ := f.view().apply(raw, f.observe); return !bytes.Equal(out, raw) }() {
		t.Fatal("a newer slice of the cloud's was corrected after the correction ended")
	}
	f.SetOnline(false, time.Now())
	if f.Active() {
		t.Fatal("a lost link kept the ended correction")
	}
}
