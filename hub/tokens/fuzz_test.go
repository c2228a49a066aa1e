package tokens

import "testing"

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"kind":"TokenRequest","apiVersion":"authentication.k8s.io/v1","spec":{"audiences":["a"],"expirationSeconds":3607}}`))
	f.Add([]byte("k8s\x00\n\x2a\n\x18authentication.k8s.io/v1\x12\x0cTokenRequest\x12\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if tr, err := Decode(b); err == nil {
			_ = KeyOf("node", "ns", "sa", tr).name()
			if _, err := Encode(tr, true); err != nil {
				t.Fatalf("a decoded TokenRequest does not encode: %v", err)
			}
		}
	})
}

func FuzzJWTExpiry(f *testing.F) {
	f.Add("eyJhbGciOiJSUzI1NiJ9.eyJleHAiOjE3MDAwMDAwMDB9.sig")
	f.Fuzz(func(t *testing.T, tok string) { _, _ = jwtExpiry(tok) })
}
