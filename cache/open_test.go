package cache

import (
	"runtime"
	"testing"

	"nodehub/wire"
)

// openFixture writes n EndpointSlices (protobuf, 10 endpoints each: compressed with their
// headers) into a cache in dir and closes it.
func openFixture(tb testing.TB, dir string, n int) {
	tb.Helper()
	s, err := Open(dir, nil)
	if err != nil {
		tb.Fatal(err)
	}
	r := Resource{Owner: "kube-proxy", Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}
	for i := 0; i < n; i++ {
		raw, err := wire.EncodeProto("discovery.k8s.io/v1", "EndpointSlice", benchSlice(i, 1))
		if err != nil {
			tb.Fatal(err)
		}
		m, _ := wire.ExtractMeta(raw, "endpointslices")
		h := headerFor(m, wire.MediaProtobuf)
		if err := s.Put(Key{Resource: r, Namespace: m.Namespace, Name: m.Name}, &h, raw); err != nil {
			tb.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
}

// Opening a cache indexes every record from its header alone, decoded into one buffer: a
// hub's cold start (the first cached answer waits for it) allocated 4 KiB more per record.
func TestOpenAllocatesLittlePerRecord(t *testing.T) {
	dir := t.TempDir()
	const n = 1000
	openFixture(t, dir, n)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	s, err := Open(dir, nil)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 1024 {
		t.Fatalf("%d bytes allocated per record to open the cache", per)
	}
	var got int
	if err := s.Keys(Resource{Owner: "kube-proxy", Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}, "", func(Key) error { got++; return nil }); err != nil || got != n {
		t.Fatalf("%d objects indexed, %v", got, err)
	}
}

// BenchmarkOpen1000Slices is a cold start's index load: 1,000 compressed EndpointSlices.
func BenchmarkOpen1000Slices(b *testing.B) {
	dir := b.TempDir()
	openFixture(b, dir, 1000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, err := Open(dir, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		s.Close()
		b.StartTimer()
	}
}
