package metrics

import (
	"fmt"
	"strings"
	"testing"
)

func TestTextFormat(t *testing.T) {
	r := NewRegistry()
	c := r.NewCounter("x_requests_total", "Requests.", "verb", "code")
	g := r.NewGauge("x_healthy", "Health.", "server")
	h := r.NewHistogram("x_seconds", "Latency.", []float64{0.1, 1}, "verb")
	r.NewGaugeFunc("x_up", "Up.", func() float64 { return 1 })
	c.Inc("get", "200")
	c.Add(2, "get", "200")
	g.Set(1, `a"b\c`)
	h.Observe(0.05, "get")
	h.Observe(0.5, "get")
	h.Observe(5, "get")
	var b strings.Builder
	if _, err := r.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	want := `# HELP x_healthy Health.
# TYPE x_healthy gauge
x_healthy{server="a_b_c"} 1
# HELP x_requests_total Requests.
# TYPE x_requests_total counter
x_requests_total{verb="get",code="200"} 3
# HELP x_seconds Latency.
# TYPE x_seconds histogram
x_seconds_bucket{verb="get",le="0.1"} 1
x_seconds_bucket{verb="get",le="1"} 2
x_seconds_bucket{verb="get",le="+Inf"} 3
x_seconds_sum{verb="get"} 5.55
x_seconds_count{verb="get"} 3
# HELP x_up Up.
# TYPE x_up gauge
x_up 1
`
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestSeriesCapFoldsIntoOther(t *testing.T) {
	r := NewRegistry()
	c := r.NewCounter("x_total", "X.", "component")
	for i := 0; i < MaxSeries+100; i++ {
		c.Inc(fmt.Sprintf("agent-%d", i))
	}
	if got := len(c.f.series); got != MaxSeries+1 {
		t.Fatalf("%d series, want %d", got, MaxSeries+1)
	}
	if v := c.Value("other"); v != 100 {
		t.Fatalf("other = %v", v)
	}
}

// A label value comes from what a client sends (its User-Agent, a path segment): it is cut and
// its odd bytes replaced, so 100 requests with 1 MB User-Agents leave a small registry.
func TestLabelValuesAreBounded(t *testing.T) {
	r := NewRegistry()
	c := r.NewCounter("x_requests_total", "Requests.", "component")
	for i := 0; i < 100; i++ {
		c.Inc(fmt.Sprintf("%03d", i) + strings.Repeat("a\"\n{}", 200_000))
	}
	c.Inc("kube-proxy")
	c.Inc("https://[fd00::1]:6443")
	var b strings.Builder
	if _, err := r.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	if b.Len() > 100*(MaxValueLen+64) {
		t.Fatalf("/metrics is %d bytes for 102 series", b.Len())
	}
	for _, want := range []string{`component="kube-proxy"} 1`, `component="https://[fd00::1]:6443"} 1`, `component="042a____a____a`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %s in\n%.2000s", want, b.String())
		}
	}
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, "x_requests_total{") && len(line) > len(`x_requests_total{component=""} 1`)+MaxValueLen {
			t.Fatalf("label value not cut: %d bytes", len(line))
		}
	}
}

// A histogram keeps fewer label sets than a counter: each prints a line per bucket.
func TestHistogramSeriesCap(t *testing.T) {
	r := NewRegistry()
	h := r.NewHistogram("x_seconds", "Latency.", []float64{0.1, 1}, "component")
	for i := 0; i < 3*MaxHistogramSeries; i++ {
		h.Observe(0.5, fmt.Sprint("c", i))
	}
	var b strings.Builder
	_, _ = r.WriteTo(&b)
	if n := strings.Count(b.String(), "x_seconds_count{"); n != MaxHistogramSeries+1 {
		t.Fatalf("%d histogram series, want %d and other", n, MaxHistogramSeries)
	}
	if !strings.Contains(b.String(), `x_seconds_count{component="other"} 200`) {
		t.Fatalf("folded series:\n%s", b.String()[len(b.String())-300:])
	}
}
