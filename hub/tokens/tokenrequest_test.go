package tokens

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The own codec reads and writes what the generated one does.
func TestTokenRequestCodecMatchesGenerated(t *testing.T) {
	exp := int64(3607)
	gen := &authenticationv1.TokenRequest{
		TypeMeta:   metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "TokenRequest"},
		ObjectMeta: metav1.ObjectMeta{Name: "sa", Namespace: "ns", UID: "u1", CreationTimestamp: metav1.NewTime(time.Unix(1700000000, 0))},
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"a", "b"}, ExpirationSeconds: &exp,
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "p", UID: "pu"},
			Attestations:   map[string]authenticationv1.AttestationValue{"x": {}}},
		Status: authenticationv1.TokenRequestStatus{Token: "tok", ExpirationTimestamp: metav1.NewTime(time.Unix(1700003600, 0))},
	}
	want, err := gen.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var own TokenRequest
	if err := own.Unmarshal(want); err != nil {
		t.Fatal(err)
	}
	got, err := own.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("protobuf differs:\n%q\n%q", got, want)
	}
	if own.Status.Token != "tok" || *own.Spec.ExpirationSeconds != 3607 || own.Spec.BoundObjectRef.UID != "pu" || own.UID != "u1" {
		t.Fatalf("decoded %+v", own)
	}
	wantJSON, _ := json.Marshal(gen)
	var ownJ TokenRequest
	if err := json.Unmarshal(wantJSON, &ownJ); err != nil {
		t.Fatal(err)
	}
	gotJSON, _ := json.Marshal(&ownJ)
	if !bytes.Equal(gotJSON, wantJSON) {
		t.Fatalf("JSON differs:\n%s\n%s", gotJSON, wantJSON)
	}
	// Without the optional parts too.
	bare := &authenticationv1.TokenRequest{}
	want, _ = bare.Marshal()
	own = TokenRequest{}
	if err := own.Unmarshal(want); err != nil {
		t.Fatal(err)
	}
	if got, _ := own.Marshal(); !bytes.Equal(got, want) {
		t.Fatalf("bare protobuf differs:\n%q\n%q", got, want)
	}
	wantJSON, _ = json.Marshal(bare)
	ownJ = TokenRequest{}
	json.Unmarshal(wantJSON, &ownJ)
	if gotJSON, _ := json.Marshal(&ownJ); !bytes.Equal(gotJSON, wantJSON) {
		t.Fatalf("bare JSON differs:\n%s\n%s", gotJSON, wantJSON)
	}
}
