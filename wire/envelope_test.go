package wire

import (
	"bytes"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
)

// The hand-written envelope is byte for byte what runtime.Unknown's generated code writes.
func TestEnvelopeIsRuntimeUnknowns(t *testing.T) {
	for _, c := range []struct {
		av, kind string
		raw      []byte
	}{
		{"v1", "Pod", []byte{0x0a, 0x02, 'h', 'i'}},
		{"discovery.k8s.io/v1", "EndpointSliceList", bytes.Repeat([]byte{7}, 70000)},
		{"", "", []byte{}},
		{"v1", "Status", nil},
		{strings.Repeat("g", 200), "K", []byte{1}},
	} {
		u := runtime.Unknown{Raw: c.raw}
		u.APIVersion, u.Kind = c.av, c.kind
		body, err := u.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		want := append(append([]byte(nil), protoMagic...), body...)
		got, err := EncodeProtoRaw(c.av, c.kind, c.raw)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s/%s (%d bytes, nil %v): %v\n got %x\nwant %x", c.av, c.kind, len(c.raw), c.raw == nil, err, head(got), head(want))
		}
		if c.raw != nil && len(c.raw) > 1 {
			split := encodeEnvelope(c.av, c.kind, true, c.raw[:1], nil, c.raw[1:])
			if !bytes.Equal(split, want) {
				t.Errorf("%s/%s: envelope of parts differs", c.av, c.kind)
			}
		}
	}
}

func head(b []byte) []byte {
	if len(b) > 40 {
		return b[:40]
	}
	return b
}
