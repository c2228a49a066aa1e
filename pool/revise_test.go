package pool

import (
	"bytes"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/wire"
)

// rewriteRevisions is a revision that changes one byte string into another in every object, as
// the hub's endpoint corrections change a dead address into the one kubelet reported.
type rewriteRevisions struct{ from, to string }

func (r rewriteRevisions) Served() func([]byte) []byte { return r.apply }

func (r rewriteRevisions) Pass() (func([]byte) ([]byte, bool), <-chan struct{}) {
	return func(raw []byte) ([]byte, bool) {
		out := r.apply(raw)
		return out, !bytes.Equal(out, raw)
	}, make(chan struct{})
}

func (r rewriteRevisions) apply(raw []byte) []byte {
	return bytes.ReplaceAll(raw, []byte(r.from), []byte(r.to))
}

// Issue 30: a watch's revision pass sends each object it revised through the client's Transform
// as the store holds it (the cloud's bytes): Transform applies the revision of the moment itself
// (the hub's endpoint corrections are a filter of its chain, and take what they are given for the
// cloud's word). Given the revised bytes, the corrections' filter saw its own output, took it for
// the cloud agreeing with kubelet and ended the corrections: kube-proxy was sent the slice's dead
// addresses right after the link returned.
func TestRevisePassesTheStoresBytesThroughTransform(t *testing.T) {
	st := NewStore(Resource{Version: "v1", Resource: "services"})
	o := protoService(t, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", ResourceVersion: "10"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.10"}})
	st.replace([]*object{o}, 10, "v1", "Service")
	rev := rewriteRevisions{from: "10.0.0.10", to: "10.0.0.20"}
	var given [][]byte
	sv := Serving{Info: request(t, ""), Revisions: rev, Transform: func(raw []byte) ([]byte, bool) {
		given = append(given, raw)
		return rev.apply(raw), false
	}}
	rec := httptest.NewRecorder()
	ww := wire.StartWatch(rec, false, 0)
	if _, ok := st.revise(ww, sv, wire.Selector{}, false); !ok {
		t.Fatal("revise: client gone")
	}
	ww.Flush()
	if len(given) != 1 || !bytes.Equal(given[0], o.raw) {
		t.Fatalf("Transform was given %q, want the store's object once", given)
	}
	if body := rec.Body.String(); !strings.Contains(body, `"MODIFIED"`) || !strings.Contains(body, "10.0.0.20") || strings.Contains(body, "10.0.0.10") {
		t.Fatalf("sent %s, want the revised object as MODIFIED", body)
	}
}
