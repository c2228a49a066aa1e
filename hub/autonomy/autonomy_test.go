package autonomy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/wire"
)

func nodeRaw(t *testing.T, ann, lbl map[string]string, conds []corev1.NodeCondition, protobuf bool) []byte {
	t.Helper()
	n := &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{Name: "edge-1", Annotations: ann, Labels: lbl},
		Status: corev1.NodeStatus{Conditions: conds}}
	b, err := wire.Encode(n, protobuf)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func autonomyOf(t *testing.T, raw []byte) *corev1.NodeCondition {
	t.Helper()
	obj, err := wire.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range obj.(*corev1.Node).Status.Conditions {
		if c.Type == autonomyCondition {
			return &c
		}
	}
	return nil
}

func TestAutonomyCondition(t *testing.T) {
	on := map[string]string{autonomyAnnotation: "true"}
	for _, pb := range []bool{false, true} {
		var mu sync.Mutex
		var wrote []corev1.ConditionStatus
		a := &Condition{Write: func(_ context.Context, c corev1.NodeCondition) error {
			mu.Lock()
			wrote = append(wrote, c.Status)
			mu.Unlock()
			return nil
		}}
		ready := []corev1.NodeCondition{{Type: "Ready", Status: "True"}}
		// No annotation: False, disabled.
		out, c := a.Apply(nodeRaw(t, nil, nil, ready, pb))
		if c == nil || c.Status != corev1.ConditionFalse || c.Reason != "autonomy disabled" {
			t.Fatalf("pb=%v no annotation: %+v", pb, c)
		}
		if got := autonomyOf(t, out); got == nil || got.Status != corev1.ConditionFalse || wire.IsProtobuf(out) != pb {
			t.Fatalf("pb=%v answer: %+v", pb, got)
		}
		// Annotated: True; already True: the very same bytes.
		out, c = a.Apply(nodeRaw(t, on, nil, ready, pb))
		if c == nil || c.Status != corev1.ConditionTrue || c.Reason != "autonomy enabled successfully" {
			t.Fatalf("pb=%v annotated: %+v", pb, c)
		}
		same := nodeRaw(t, on, nil, append(ready, *c), pb)
		if out2, c2 := a.Apply(same); c2 != nil || &out2[0] != &same[0] {
			t.Fatal("an unchanged node was re-encoded")
		}
		// Not an edge worker: False.
		if _, c = a.Apply(nodeRaw(t, on, map[string]string{edgeWorkerLabel: "false"}, append(ready, corev1.NodeCondition{Type: autonomyCondition, Status: "True"}), pb)); c == nil || c.Status != corev1.ConditionFalse {
			t.Fatalf("pb=%v edge worker false: %+v", pb, c)
		}
		// Cache writes failing at more than 3 evaluations in a row: Unknown; then healthy: True.
		trueNode := nodeRaw(t, on, nil, append(ready, corev1.NodeCondition{Type: autonomyCondition, Status: "True"}), pb)
		for i := 1; i <= maxCacheFailures; i++ {
			a.CacheError(errors.New("disk full"))
			if _, c = a.Apply(trueNode); c != nil {
				t.Fatalf("pb=%v failure %d changed it already: %+v", pb, i, c)
			}
		}
		a.CacheError(errors.New("disk full"))
		if _, c = a.Apply(trueNode); c == nil || c.Status != corev1.ConditionUnknown || c.Reason != "cache failed" {
			t.Fatalf("pb=%v repeated failures: %+v", pb, c)
		}
		unknown := nodeRaw(t, on, nil, append(ready, *c), pb)
		if _, c = a.Apply(unknown); c == nil || c.Status != corev1.ConditionTrue {
			t.Fatalf("pb=%v cache healthy again: %+v", pb, c)
		}
	}
}

func TestAutonomyWritesOnceWhileOnline(t *testing.T) {
	var mu sync.Mutex
	n := 0
	online := false
	a := &Condition{Online: func() bool { return online }, Write: func(context.Context, corev1.NodeCondition) error {
		mu.Lock()
		n++
		mu.Unlock()
		return nil
	}}
	c := &corev1.NodeCondition{Type: autonomyCondition, Status: corev1.ConditionTrue}
	a.Seen(c) // offline: nothing written
	if a.next != nil {
		t.Fatal("a write was queued offline")
	}
	online = true
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for i := 0; i < 5; i++ {
		a.Seen(c) // the first queues the write; the others find it queued or made
	}
	writes := func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
	for deadline := time.Now().Add(10 * time.Second); writes() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the condition was never written")
		}
	}
	a.Seen(c) // just written: nothing queued
	a.mu.Lock()
	queued := a.next != nil
	a.mu.Unlock()
	if n := writes(); n != 1 || queued {
		t.Fatalf("%d writes (another queued: %v), want 1", n, queued)
	}
}

func TestAutonomyCacheFailureLastsUntilAWriteSucceeds(t *testing.T) {
	var written int64
	a := &Condition{FilesWritten: func() int64 { return written }}
	on := map[string]string{autonomyAnnotation: "true"}
	trueNode := nodeRaw(t, on, nil, []corev1.NodeCondition{{Type: autonomyCondition, Status: "True"}}, true)
	for i := 0; i <= maxCacheFailures; i++ {
		a.CacheError(errors.New("disk full"))
		a.Apply(trueNode)
	}
	unknown := nodeRaw(t, on, nil, []corev1.NodeCondition{{Type: autonomyCondition, Status: "Unknown"}}, true)
	for i := 0; i < 3; i++ { // no write at all: still failing
		if _, c := a.Apply(unknown); c != nil {
			t.Fatalf("changed without a successful write: %+v", c)
		}
	}
	written++
	if _, c := a.Apply(unknown); c == nil || c.Status != corev1.ConditionTrue {
		t.Fatalf("after a successful write: %+v", c)
	}
}

// The cloud's answer to kubelet's GET of its node carries the condition, with its length
// corrected; an answer that is not a plain 200 passes as it is.
func TestResponseSetsTheCondition(t *testing.T) {
	a := &Condition{}
	raw := nodeRaw(t, map[string]string{autonomyAnnotation: "true"}, nil, nil, false)
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Length": {strconv.Itoa(len(raw))}},
		ContentLength: int64(len(raw)), Body: io.NopCloser(bytes.NewReader(raw))}
	a.Response(resp)
	out, _ := io.ReadAll(resp.Body)
	if c := autonomyOf(t, out); c == nil || c.Status != corev1.ConditionTrue {
		t.Fatalf("condition %+v", c)
	}
	if resp.ContentLength != int64(len(out)) || resp.Header.Get("Content-Length") != strconv.Itoa(len(out)) {
		t.Fatalf("length %d / %q for %d bytes", resp.ContentLength, resp.Header.Get("Content-Length"), len(out))
	}
	gz := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Encoding": {"gzip"}}, Body: io.NopCloser(bytes.NewReader(raw))}
	a.Response(gz)
	if b, _ := io.ReadAll(gz.Body); !bytes.Equal(b, raw) {
		t.Fatal("a compressed answer was changed")
	}
	if p, err := Patch(corev1.NodeCondition{Type: autonomyCondition, Status: corev1.ConditionTrue}); err != nil || !bytes.Contains(p, []byte(`"type":"Autonomy"`)) {
		t.Fatalf("patch %s %v", p, err)
	}
}

// A body the hub already holds whole (the node copy read it) is not read again: a node whose
// condition is as it should be passes as that very body.
func TestResponseKeepsAWholeBodyAsItIs(t *testing.T) {
	a := &Condition{}
	raw := nodeRaw(t, nil, nil, []corev1.NodeCondition{{Type: autonomyCondition, Status: corev1.ConditionFalse}}, true)
	body := wire.NewWhole(raw)
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, ContentLength: int64(len(raw)), Body: body}
	a.Response(resp)
	if resp.Body != io.ReadCloser(body) {
		t.Fatalf("the whole body was replaced by a %T", resp.Body)
	}
}
