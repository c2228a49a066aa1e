package e2e

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"nodehub/e2e/harness"
)

// kubeletLeaseLoop plays kubelet's node lease controller through the hub until ctx ends,
// counting its updates in sent (if not nil).
func kubeletLeaseLoop(ctx context.Context, cl *kubernetes.Clientset, every time.Duration, sent *atomic.Int64) error {
	leases := cl.CoordinationV1().Leases("kube-node-lease")
	lease, err := leases.Get(ctx, harness.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		holder, sec := harness.NodeName, int32(40)
		lease, err = leases.Create(ctx, &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: harness.NodeName},
			Spec: coordv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &sec}}, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("kubelet lease get/create: %w", err)
	}
	for {
		now := metav1.NewMicroTime(time.Now())
		lease.Spec.RenewTime = &now
		if lease, err = leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("kubelet lease update: %w", err)
		}
		if sent != nil {
			sent.Add(1)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}

func cloudRenewTime(t *testing.T) time.Time {
	t.Helper()
	l, err := cluster.Admin.CoordinationV1().Leases("kube-node-lease").Get(context.Background(), harness.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.RenewTime == nil {
		return time.Time{}
	}
	return l.Spec.RenewTime.Time
}

func TestNodeLeaseRenewedWhileKubeletTalksAndNotAfterGrace(t *testing.T) {
	h := startHub(t, "--kubelet-health-grace-period=3s")
	ctx, stopKubelet := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	puts0 := readAPIServerCounts(t, context.Background(), "leases").done["PUT"]
	var sent atomic.Int64
	go func() { errc <- kubeletLeaseLoop(ctx, h.Client(kubeletUA, true), 500*time.Millisecond, &sent) }()

	var first time.Time
	eventually(t, 5*time.Second, "cloud lease exists", func() error {
		l, err := cluster.Admin.CoordinationV1().Leases("kube-node-lease").Get(context.Background(), harness.NodeName, metav1.GetOptions{})
		if err == nil && l.Spec.RenewTime != nil {
			first = l.Spec.RenewTime.Time
		}
		return err
	})
	eventually(t, 30*time.Second, "cloud lease renewed while kubelet talks", func() error {
		if r := cloudRenewTime(t); !r.After(first) {
			return fmt.Errorf("renewTime still %v", r)
		}
		return nil
	})
	// The hub's renewals reset the lease's managed fields once (it is their only writer): the
	// apiserver's answer to each renewal then carries none (it tracks none for an object that
	// has none), or the renew time's entry alone.
	eventually(t, 30*time.Second, "the lease's managed fields reset", func() error {
		l, err := cluster.Admin.CoordinationV1().Leases("kube-node-lease").Get(context.Background(), harness.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(l.ManagedFields) > 1 || len(l.ManagedFields) == 1 && (l.ManagedFields[0].FieldsV1 == nil || string(l.ManagedFields[0].FieldsV1.Raw) != `{"f:spec":{"f:renewTime":{}}}`) {
			return fmt.Errorf("managedFields %+v", l.ManagedFields)
		}
		return nil
	})
	for sent.Load() < 30 { // enough of kubelet's updates that their reaching the cloud would show
		time.Sleep(100 * time.Millisecond)
	}
	stopKubelet()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}

	// Kubelet's own writes never reached the cloud: every write there is the hub's. Renewals are
	// patches; the hub updates the whole lease when kubelet's spec first differs from the cloud's
	// (once per server, and again after a conflict between the two servers' heartbeats): a few
	// updates, where 30 of kubelet's, spread over the two servers, would be about 15 on the one
	// read here.
	puts := readAPIServerCounts(t, context.Background(), "leases").done["PUT"] - puts0
	t.Logf("lease updates the apiserver served while kubelet sent %d through the hub: %.0f", sent.Load(), puts)
	if puts >= 8 {
		t.Fatalf("the apiserver served %.0f lease updates while kubelet sent %d through the hub: kubelet's requests reached the cloud", puts, sent.Load())
	}

	// After the grace period (3s) plus one heartbeat, renewals stop: waited for as a state (no
	// renewal for two heartbeats and more), never after a fixed time a loaded machine may overrun.
	quiet := time.Now()
	eventually(t, 60*time.Second, "renewals stop after kubelet went quiet", func() error {
		r1 := cloudRenewTime(t)
		time.Sleep(3 * time.Second)
		if r2 := cloudRenewTime(t); !r2.Equal(r1) {
			return fmt.Errorf("renewed again: %v then %v", r1, r2)
		}
		return nil
	})
	t.Logf("renewals stopped within %v of kubelet going quiet", time.Since(quiet).Round(time.Second))
	if v := healthGauge(t, h, cluster.APIServers[0]); v != 1 {
		t.Fatalf("server unhealthy while only reading the lease: %v", v)
	}

	// Kubelet comes back: renewals resume.
	ctx2, stop2 := context.WithCancel(context.Background())
	defer stop2()
	go func() { _ = kubeletLeaseLoop(ctx2, h.Client(kubeletUA, false), 500*time.Millisecond, nil) }()
	r3 := cloudRenewTime(t)
	eventually(t, 4*time.Second, "renewals resume when kubelet returns", func() error {
		if !cloudRenewTime(t).After(r3) {
			return fmt.Errorf("not renewed")
		}
		return nil
	})
}
