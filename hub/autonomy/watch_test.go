package autonomy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/wire"
)

// watchOf runs frames through Watch as a stream of the given format and returns the events the
// client reads.
func watchOf(t *testing.T, a *Condition, pb bool, evs ...wire.WatchEvent) []wire.WatchEvent {
	t.Helper()
	var in bytes.Buffer
	media := wire.MediaType{Type: wire.MediaJSON}
	frame := wire.EncodeJSONWatchEvent
	if pb {
		media, frame = wire.MediaType{Type: wire.MediaProtobuf}, wire.EncodeProtoWatchEvent
	}
	for _, ev := range evs {
		in.Write(frame(ev))
	}
	out, err := io.ReadAll(a.Watch(io.NopCloser(&in), media, "edge-1"))
	if err != nil {
		t.Fatal(err)
	}
	var got []wire.WatchEvent
	sp := wire.NewWatchSplitter(media, func(ev wire.WatchEvent) error {
		got = append(got, wire.WatchEvent{Type: ev.Type, Object: bytes.Clone(ev.Object)})
		return nil
	})
	if _, err := sp.Write(out); err != nil {
		t.Fatal(err)
	}
	return got
}

// A watch frame of the node with the annotation makes the condition True without any GET, and one
// without it False: in the event kubelet reads (re-encoded in the stream's format) and in the
// write to the cloud. Another node's events, bookmarks, and a node already right pass as they came.
func TestWatchSetsTheCondition(t *testing.T) {
	on := map[string]string{autonomyAnnotation: "true"}
	for _, pb := range []bool{false, true} {
		a := &Condition{Write: func(context.Context, corev1.NodeCondition) error { return nil }}
		other := corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{Name: "edge-2", Annotations: on}}
		otherRaw, _ := wire.Encode(&other, pb)
		right := nodeRaw(t, on, nil, []corev1.NodeCondition{{Type: autonomyCondition, Status: corev1.ConditionTrue}}, pb)
		got := watchOf(t, a, pb,
			wire.WatchEvent{Type: wire.EventAdded, Object: nodeRaw(t, on, nil, nil, pb)},
			wire.WatchEvent{Type: wire.EventModified, Object: otherRaw},
			wire.WatchEvent{Type: wire.EventModified, Object: right})
		if len(got) != 3 {
			t.Fatalf("pb=%v: %d events, want 3", pb, len(got))
		}
		if c := autonomyOf(t, got[0].Object); got[0].Type != wire.EventAdded || c == nil || c.Status != corev1.ConditionTrue || bytes.HasPrefix(got[0].Object, []byte("k8s\x00")) != pb {
			t.Fatalf("pb=%v annotated: %s %+v", pb, got[0].Type, c)
		}
		if !bytes.Equal(got[1].Object, otherRaw) || !bytes.Equal(got[2].Object, right) {
			t.Fatalf("pb=%v: another node's event or a right one was changed", pb)
		}
		if a.next == nil || a.next.Status != corev1.ConditionTrue {
			t.Fatalf("pb=%v: queued %+v, want True", pb, a.next)
		}
		got = watchOf(t, a, pb, wire.WatchEvent{Type: wire.EventModified, Object: right[:len(right):len(right)]},
			wire.WatchEvent{Type: wire.EventModified, Object: nodeRaw(t, nil, nil, []corev1.NodeCondition{{Type: autonomyCondition, Status: corev1.ConditionTrue}}, pb)})
		if c := autonomyOf(t, got[1].Object); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "autonomy disabled" {
			t.Fatalf("pb=%v annotation removed: %+v", pb, c)
		}
		if a.next == nil || a.next.Status != corev1.ConditionFalse {
			t.Fatalf("pb=%v: queued %+v, want False (the latest replaces a write not yet made)", pb, a.next)
		}
	}
}

// With no read and no event of the node (v1.37's kubelet between changes of its node), Run
// evaluates the node as the cloud last sent it: cache writes failing turn the condition Unknown
// in the cloud all the same.
func TestAutonomyEvaluatesTheNodeWithoutReads(t *testing.T) {
	wrote := make(chan corev1.ConditionStatus, 16)
	trueNode := nodeRaw(t, map[string]string{autonomyAnnotation: "true"}, nil, []corev1.NodeCondition{{Type: autonomyCondition, Status: corev1.ConditionTrue}}, true)
	// No file written: an evaluation between two failures changes nothing.
	a := &Condition{every: time.Millisecond, Current: func() []byte { return trueNode }, FilesWritten: func() int64 { return 0 },
		Write: func(_ context.Context, c corev1.NodeCondition) error { wrote <- c.Status; return nil }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	evaluated := func() time.Time {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.evaluated
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case s := <-wrote:
			if s != corev1.ConditionUnknown {
				t.Fatalf("wrote %s, want Unknown", s)
			}
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the condition never turned Unknown without a read of the node")
		}
		before := evaluated()
		a.CacheError(errors.New("disk full"))
		for evaluated() == before && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond) // until Run evaluated again
		}
	}
}
