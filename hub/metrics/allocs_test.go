package metrics

import "testing"

// Counting on a series that exists allocates nothing: the hub counts several times per proxied
// request.
func TestKnownSeriesCountsWithoutAllocating(t *testing.T) {
	r := NewRegistry()
	c := r.NewCounter("nodehub_test_total", "test", "verb", "resource")
	g := r.NewGauge("nodehub_test_inflight", "test", "verb")
	h := r.NewHistogram("nodehub_test_seconds", "test", []float64{0.1, 1}, "verb")
	c.Inc("get", "nodes")
	g.Add(1, "get")
	h.Observe(0.5, "get")
	if n := testing.AllocsPerRun(100, func() {
		c.Inc("get", "nodes")
		g.Add(1, "get")
		g.Add(-1, "get")
		h.Observe(0.5, "get")
	}); n != 0 {
		t.Fatalf("%v allocations per count", n)
	}
}
