package wire

import "testing"

func TestWithoutCBOR(t *testing.T) {
	for _, tc := range []struct {
		in, out       string
		dropped, only bool
	}{
		{"application/json", "application/json", false, false},
		{"", "", false, false},
		{"application/cbor, */*", "*/*", true, false},
		{"application/cbor;q=1,application/json;q=0.9", "application/json;q=0.9", true, false},
		{"application/cbor-seq, application/vnd.kubernetes.protobuf, application/json", "application/vnd.kubernetes.protobuf, application/json", true, false},
		{"application/cbor", "application/cbor", false, true},
		{"application/CBOR-seq, application/cbor", "application/CBOR-seq, application/cbor", false, true},
	} {
		out, dropped := WithoutCBOR(tc.in)
		if out != tc.out || dropped != tc.dropped || CBOROnly(tc.in) != tc.only {
			t.Errorf("%q: %q %v only %v", tc.in, out, dropped, CBOROnly(tc.in))
		}
	}
}
