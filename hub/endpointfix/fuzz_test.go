package endpointfix

import (
	"bytes"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// Whatever bytes a slice, an Endpoints or another hub's note brings, the corrections neither
// panic nor touch a slice they do not change, and the pool's notes never put a report on a node
// other than the one it was filed under.
func FuzzCorrections(f *testing.F) {
	seed := func(pb bool) []byte {
		b, _ := wireEncode(slice("a", discoveryv1.AddressTypeIPv4, ep("web-1", "u1", node, true, true, false, "10.0.0.1")), pb)
		return b
	}
	f.Add(seed(false), []byte(`[{"Namespace":"ns","Name":"web-1","Node":"edge-b","IPs":["10.0.0.9"]}]`))
	f.Add(seed(true), []byte(`[]`))
	f.Fuzz(func(t *testing.T, raw, note []byte) {
		fx := New(node, 0, nil)
		fx.Reported(seed(false)) // not a pod: ignored
		p := pod("web-1", "u1", false, "10.0.0.9")
		b, _ := wireEncode(p, false)
		fx.Reported(b)
		fx.SetForeign(map[string][]byte{"edge-b": note, node: note})
		for _, v := range fx.view().pods {
			if v.Node != node && v.Node != "edge-b" {
				t.Fatalf("a report filed for node %q", v.Node)
			}
		}
		in := bytes.Clone(raw)
		out := fx.NewWatch().Served()(raw)
		if !bytes.Equal(raw, in) {
			t.Fatal("the input was modified")
		}
		_ = out
		fn, _ := fx.NewWatch().Pass()
		if fn != nil {
			fn(raw)
		}
		fx.Reported(raw)
		fx.ReportedOnline(raw)
	})
}
