package pool

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/wire"
)

// A list served item by item is the List ListBuilder would have built whole, in both formats,
// with the client's transform applied and its dropped objects left out.
func TestServeListStreamsTheListListBuilderBuilds(t *testing.T) {
	res := Resource{Version: "v1", Resource: "services"}
	st := NewStore(res)
	var items []*object
	for i := 0; i < 300; i++ {
		items = append(items, protoService(t, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s-%03d", i), Namespace: "ns", ResourceVersion: strconv.Itoa(10 + i)},
			Spec: corev1.ServiceSpec{ClusterIP: fmt.Sprintf("10.0.%d.%d", i/250, i%250)}}))
	}
	st.replace(items, 999, "v1", "Service")
	// The transform drops every third object and rewrites every fifth (as a filter would).
	transform := func(raw []byte) ([]byte, bool) {
		m, err := wire.ExtractMeta(raw, "services")
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(m.Name[2:])
		switch {
		case n%3 == 0:
			return nil, true
		case n%5 == 0:
			s := &corev1.Service{}
			if _, _, err := wire.DecodeProto(raw, s); err != nil {
				t.Fatal(err)
			}
			s.Spec.ClusterIP = "169.254.2.1"
			out, err := wire.EncodeProto("v1", "Service", s)
			if err != nil {
				t.Fatal(err)
			}
			return out, false
		}
		return raw, false
	}
	for _, pb := range []bool{true, false} {
		ri := request(t, "")
		if pb {
			ri.Accept = wire.MediaType{Type: wire.MediaProtobuf}
		}
		rec := httptest.NewRecorder()
		st.ServeList(rec, Serving{Info: ri, Transform: transform})

		want := &wire.ListBuilder{Protobuf: pb, APIVersion: "v1", Kind: "Service"}
		for _, o := range items {
			out, drop := transform(o.raw)
			if drop {
				continue
			}
			out, err := wire.Convert(out, pb)
			if err != nil {
				t.Fatal(err)
			}
			if err := want.Add(out); err != nil {
				t.Fatal(err)
			}
		}
		wantBody, err := want.Bytes("999")
		if err != nil {
			t.Fatal(err)
		}
		got := rec.Body.Bytes()
		if cl := rec.Header().Get("Content-Length"); pb && cl != strconv.Itoa(len(got)) {
			t.Errorf("protobuf: Content-Length %s for %d bytes", cl, len(got))
		}
		if pb {
			if !bytes.Equal(got, wantBody) {
				t.Fatalf("protobuf list differs from ListBuilder's (%d vs %d bytes)", len(got), len(wantBody))
			}
			continue
		}
		// JSON: the same items (the streamed list puts its metadata last).
		var a, b struct {
			Items    []map[string]any `json:"items"`
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(got, &a); err != nil {
			t.Fatalf("json list: %v\n%s", err, got)
		}
		if err := json.Unmarshal(wantBody, &b); err != nil {
			t.Fatal(err)
		}
		if len(a.Items) != 200 || fmt.Sprint(a) != fmt.Sprint(b) {
			t.Fatalf("json list: %d items, rv %q; differs from ListBuilder's", len(a.Items), a.Metadata.ResourceVersion)
		}
	}
}

// The event window keeps only what selectors read of a replaced object, not its bytes, and a
// watch with a selector still sees an object enter (ADDED) and leave (DELETED) its selection.
func TestWindowKeepsNoBytesOfReplacedObjects(t *testing.T) {
	res := Resource{Version: "v1", Resource: "services"}
	mk := func(rv int, app string) *object {
		return protoService(t, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", ResourceVersion: strconv.Itoa(rv), Labels: map[string]string{"app": app}}})
	}
	st := NewStore(res)
	st.replace([]*object{mk(10, "x")}, 10, "v1", "Service")
	st.apply(wire.EventModified, mk(11, "y")) // leaves app=x
	st.apply(wire.EventModified, mk(12, "x")) // enters app=x again
	for _, ev := range st.events {
		if ev.prev == nil || ev.prev.raw != nil || ev.prev.labels.Get("app") == "" {
			t.Fatalf("window event at %d: prev %+v", ev.rv, ev.prev)
		}
	}
	code, body := watchBody(t, st, "resourceVersion=10&labelSelector=app%3Dx")
	if code != 200 || strings.Count(body, `"type":"DELETED"`) != 1 || strings.Count(body, `"type":"ADDED"`) != 1 || strings.Index(body, "DELETED") > strings.Index(body, "ADDED") {
		t.Fatalf("watch: %d %s", code, body)
	}
}

// protoService is s as a stored object, in protobuf as the cloud sends it.
func protoService(t *testing.T, s *corev1.Service) *object {
	t.Helper()
	raw, err := wire.EncodeProto("v1", "Service", s)
	if err != nil {
		t.Fatal(err)
	}
	o, err := newObject(raw, Resource{Version: "v1", Resource: "services"})
	if err != nil {
		t.Fatal(err)
	}
	return o
}
