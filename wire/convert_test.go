package wire

import (
	"bytes"
	"testing"
)

func TestConvertRoundTrip(t *testing.T) {
	js, pb := encoders(t)
	j := bytes.TrimSuffix(encode(t, js, testPod(2)), []byte("\n"))
	p := encode(t, pb, testPod(2))
	toProto, err := Convert(j, true)
	if err != nil || !bytes.Equal(toProto, p) {
		t.Fatalf("JSON → protobuf differs from the apiserver's protobuf: %v", err)
	}
	toJSON, err := Convert(p, false)
	if err != nil {
		t.Fatal(err)
	}
	back, _ := Convert(toJSON, true)
	if !bytes.Equal(back, p) {
		t.Fatal("protobuf → JSON → protobuf changed the object")
	}
	if same, _ := Convert(p, true); !bytes.Equal(same, p) {
		t.Fatal("no-op conversion changed bytes")
	}
	if _, err := Convert([]byte(`{"apiVersion":"x.io/v1","kind":"Thing"}`), true); err == nil {
		t.Fatal("unknown kind converted")
	}
}
