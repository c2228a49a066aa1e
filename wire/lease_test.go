package wire

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestLeaseMatchesGeneratedCode(t *testing.T) {
	holder, sec, tr, strat := "edge-1", int32(40), int32(-3), "OldestEmulationVersion"
	now := metav1.NewMicroTime(time.Date(2026, 11, 21, 1, 2, 3, 456789000, time.UTC))
	ref := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "edge-1", Namespace: "kube-node-lease", ResourceVersion: "9",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "edge-1", UID: "u"}}},
		Spec: coordv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &sec, RenewTime: &now, AcquireTime: &now, LeaseTransitions: &tr, Strategy: (*coordv1.CoordinatedLeaseStrategy)(&strat)}}
	want, _ := ref.Marshal()
	var ours Lease
	if err := ours.Unmarshal(want); err != nil {
		t.Fatal(err)
	}
	got, _ := ours.Marshal()
	if !bytes.Equal(got, want) {
		t.Fatalf("protobuf differs from the generated code's")
	}
	j1, _ := json.Marshal(ref)
	j2, _ := json.Marshal(&ours)
	if !bytes.Equal(j1, j2) {
		t.Fatalf("JSON differs:\n%s\n%s", j1, j2)
	}
	c := ours.DeepCopy()
	*c.Spec.HolderIdentity = "other"
	if *ours.Spec.HolderIdentity != "edge-1" {
		t.Fatal("DeepCopy shares the spec")
	}
}
