package cache

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestLZRoundTrips(t *testing.T) {
	inputs := [][]byte{nil, []byte("a"), []byte("abcd"), []byte(strings.Repeat("a", 100000)),
		[]byte(strings.Repeat("0f3c1c2e-1111-2222-3333-444455556666 pod-42-abcdefgh ", 40))}
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 300; n++ {
		b := make([]byte, rng.IntN(5000))
		for i := range b {
			if i > 10 && rng.IntN(3) == 0 {
				b[i] = b[i-1-rng.IntN(10)]
			} else {
				b[i] = byte(rng.IntN(7))
			}
		}
		inputs = append(inputs, b)
	}
	for _, in := range inputs {
		z := lzEncode(nil, in)
		out, err := lzDecode(z, len(in))
		if err != nil || !bytes.Equal(out, in) {
			t.Fatalf("round trip of %d bytes: %v", len(in), err)
		}
		if len(in) > 0 {
			if _, err := lzDecode(z, len(in)-1); err == nil {
				t.Fatal("a body past max decoded")
			}
		}
	}
}

func FuzzLZDecode(f *testing.F) {
	f.Add(lzEncode(nil, []byte(strings.Repeat("abcabcabd", 30))))
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := lzDecode(b, 1<<20)
		if err == nil && len(out) > 1<<20 {
			t.Fatal("past max")
		}
	})
}
