package wire

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestProtoEnvelopeRoundTrip(t *testing.T) {
	holder := "edge-1"
	in := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "edge-1", Namespace: "kube-node-lease", ResourceVersion: "7"}, Spec: coordv1.LeaseSpec{HolderIdentity: &holder}}
	body, err := EncodeProto("coordination.k8s.io/v1", "Lease", in)
	if err != nil {
		t.Fatal(err)
	}
	if !IsProtobuf(body) {
		t.Fatalf("no magic: %q", body[:8])
	}
	var out coordv1.Lease
	av, kind, err := DecodeProto(body, &out)
	if err != nil {
		t.Fatal(err)
	}
	if av != "coordination.k8s.io/v1" || kind != "Lease" || out.Name != "edge-1" || out.ResourceVersion != "7" || *out.Spec.HolderIdentity != holder {
		t.Fatalf("round trip: %s %s %+v", av, kind, out)
	}
	if _, _, _, err := DecodeProtoEnvelope([]byte(`{"kind":"Lease"}`)); err != ErrNotProtobuf {
		t.Fatalf("JSON body: err %v", err)
	}
	if _, _, _, err := DecodeProtoEnvelope([]byte("k8s\x00\xff\xff\xff")); err == nil {
		t.Fatal("garbage envelope decoded")
	}
}

func TestWriteStatus(t *testing.T) {
	for _, proto := range []bool{false, true} {
		rec := httptest.NewRecorder()
		accept := MediaType{Type: MediaJSON}
		if proto {
			accept.Type = MediaProtobuf
		}
		WriteStatus(rec, accept, http.StatusServiceUnavailable, "no healthy cloud server")
		if rec.Code != 503 {
			t.Fatalf("code %d", rec.Code)
		}
		var st metav1.Status
		if proto {
			if rec.Header().Get("Content-Type") != MediaProtobuf {
				t.Fatalf("content type %q", rec.Header().Get("Content-Type"))
			}
			if _, _, err := DecodeProto(rec.Body.Bytes(), &st); err != nil {
				t.Fatal(err)
			}
		} else if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
			t.Fatal(err)
		}
		if st.Code != 503 || st.Reason != metav1.StatusReasonServiceUnavailable || st.Message != "no healthy cloud server" || st.Status != metav1.StatusFailure {
			t.Fatalf("status %+v", st)
		}
	}
}

func FuzzDecodeProtoEnvelope(f *testing.F) {
	body, _ := EncodeProtoRaw("v1", "Pod", []byte{0x0a, 0x02, 0x08, 0x01})
	f.Add(body)
	f.Add([]byte("k8s\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		av, kind, raw, err := DecodeProtoEnvelope(b)
		if err != nil {
			return
		}
		again, err := EncodeProtoRaw(av, kind, raw)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, raw2, err := DecodeProtoEnvelope(again); err != nil || !bytes.Equal(raw, raw2) {
			t.Fatalf("re-encode changed the message: %v", err)
		}
	})
}
