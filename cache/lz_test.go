package cache

import (
	"bytes"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

func TestLZRoundTrips(t *testing.T) {
	inputs := [][]byte{nil, []byte("a"), []byte("abcd"), []byte(strings.Repeat("a", 100000)),
		[]byte(strings.Repeat("0f3c1c2e-1111-2222-3333-444455556666 pod-42-abcdefgh ", 40)),
		// Matches in the dictionary, and one that runs from its end into the body.
		[]byte(lzDict[len(lzDict)-8:] + lzDict[len(lzDict)-8:] + "xyz" + lzDict[:300] + lzDict[1000:1200])}
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
		for _, dict := range [][]byte{nil, lzDictBytes} {
			z := lzEncode(nil, in)
			if dict != nil {
				z = lzEncodeDict(nil, append([]byte(lzDict), in...))
			}
			out, err := lzDecode(z, dict, len(in))
			if err != nil || !bytes.Equal(out, in) {
				t.Fatalf("round trip of %d bytes (dictionary %d bytes): %v", len(in), len(dict), err)
			}
			if len(in) > 0 {
				if _, err := lzDecode(z, dict, len(in)-1); err == nil {
					t.Fatal("a body past max decoded")
				}
			}
		}
	}
}

func FuzzLZDecode(f *testing.F) {
	f.Add(lzEncode(nil, []byte(strings.Repeat("abcabcabd", 30))))
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, dict := range [][]byte{nil, lzDictBytes} {
			out, err := lzDecode(b, dict, 1<<20)
			if err == nil && len(out) > 1<<20 {
				t.Fatal("past max")
			}
		}
	})
}

// A run (a match overlapping itself) is copied in doubling steps (issue 23: 16 MiB of one byte
// took 16 million one-byte copies, 311 ms).
func TestLZRunsCopyInDoublingSteps(t *testing.T) {
	dst, steps := copyMatch([]byte{'x'}, 1, 16<<20)
	if len(dst) != 16<<20+1 || bytes.Count(dst, []byte{'x'}) != len(dst) {
		t.Fatal("the run decoded wrong")
	}
	if steps > 26 {
		t.Fatalf("16 MiB of one byte took %d copies", steps)
	}
	for off := 1; off < 12; off++ {
		for ml := 0; ml < 300; ml += 7 {
			seed := []byte("0123456789ab")[:off]
			got, _ := copyMatch(append([]byte{}, seed...), off, ml)
			want := append([]byte{}, seed...)
			for i := 0; i < ml; i++ {
				want = append(want, want[len(want)-off])
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("off %d ml %d: %q, want %q", off, ml, got, want)
			}
		}
	}
}

// Start-up indexes every record without decoding bodies: 200 superseded versions of a 1 MiB
// ConfigMap (a few KiB each, compressed) are not decompressed to open the store (issue 23: every
// record, superseded ones too, was decoded before any port listened).
func TestOpenDecodesHeadersOnly(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := Resource{Owner: "kubelet", Version: "v1", Resource: "configmaps"}
	big := strings.Repeat("a", 1<<20)
	for i := 0; i < 200; i++ {
		k := Key{Resource: r, Namespace: "default", Name: "c"}
		rv := strconv.Itoa(i + 1)
		if err := s.Put(k, &Header{ContentType: "application/json", Namespace: "default", Name: "c", ResourceVersion: rv}, []byte(`{"data":{"a":"`+big+`"},"rv":"`+rv+`"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.Stats(); st.Compactions != 0 {
		t.Fatal("the log was compacted: the test proves nothing")
	}
	s.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	s, err = Open(dir, nil)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
		t.Fatalf("opening a log of 200 compressed 1 MiB versions allocated %d MiB", alloc>>20)
	}
	it, err := s.GetObject(Key{Resource: r, Namespace: "default", Name: "c"})
	if err != nil || it.Header.ResourceVersion != "200" || len(it.Body) < 1<<20 {
		t.Fatalf("the newest version reads back: %v", err)
	}
}
