// Package metrics is a small hand-written Prometheus text-format registry: counters, gauges and
// histograms with labels, no client library. Each family caps how many label sets it keeps, so a
// client that invents User-Agents cannot grow the hub's memory; label sets past the cap are folded
// into one whose values are all "other", and every value is cut to MaxValueLen bytes of a small
// alphabet.
package metrics

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// MaxSeries is how many label sets one family keeps before folding new ones into "other".
const MaxSeries = 500

// MaxHistogramSeries is the same for histograms, whose series print a line per bucket.
const MaxHistogramSeries = 100

// MaxValueLen bounds a label value, in bytes: longer values are cut (a client's User-Agent or path
// segment becomes a label value, and must not become the hub's memory).
const MaxValueLen = 128

// boundValues returns values cut to MaxValueLen with every byte outside [A-Za-z0-9._:/[]-] replaced
// by '_', copying only when one needs it.
func boundValues(values []string) []string {
	out := values
	for i, v := range values {
		if clean(v) {
			continue
		}
		if &out[0] == &values[0] {
			out = slices.Clone(values)
		}
		out[i] = boundValue(v)
	}
	return out
}

func clean(v string) bool {
	if len(v) > MaxValueLen {
		return false
	}
	for i := 0; i < len(v); i++ {
		if !allowed(v[i]) {
			return false
		}
	}
	return true
}

func allowed(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == ':' || c == '/' || c == '-' || c == '[' || c == ']'
}

func boundValue(v string) string {
	if len(v) > MaxValueLen {
		v = v[:MaxValueLen]
	}
	b := []byte(v)
	for i, c := range b {
		if !allowed(c) {
			b[i] = '_'
		}
	}
	return string(b)
}

type kind string

const (
	kindCounter   kind = "counter"
	kindGauge     kind = "gauge"
	kindHistogram kind = "histogram"
)

// Registry holds metric families and writes them in the Prometheus text exposition format.
// The zero value is not usable; call NewRegistry.
type Registry struct {
	mu       sync.Mutex
	families []*family
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{} }

type family struct {
	name, help string
	kind       kind
	labels     []string
	buckets    []float64 // histograms only

	mu     sync.RWMutex
	series map[string]*series
	fn     func() float64 // gauge funcs only
}

type series struct {
	values []string
	bits   atomic.Uint64   // counter/gauge value as float64 bits
	counts []atomic.Uint64 // histogram bucket counts (non-cumulative), last is +Inf
	sum    atomic.Uint64   // histogram sum as float64 bits
}

func (r *Registry) add(f *family) *family {
	f.series = map[string]*series{}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.families {
		if g.name == f.name {
			panic("metrics: duplicate family " + f.name)
		}
	}
	r.families = append(r.families, f)
	return f
}

// CounterVec is a family of counters.
type CounterVec struct{ f *family }

// GaugeVec is a family of gauges.
type GaugeVec struct{ f *family }

// HistogramVec is a family of histograms.
type HistogramVec struct{ f *family }

// NewCounter registers a counter family.
func (r *Registry) NewCounter(name, help string, labels ...string) *CounterVec {
	return &CounterVec{r.add(&family{name: name, help: help, kind: kindCounter, labels: labels})}
}

// NewGauge registers a gauge family.
func (r *Registry) NewGauge(name, help string, labels ...string) *GaugeVec {
	return &GaugeVec{r.add(&family{name: name, help: help, kind: kindGauge, labels: labels})}
}

// NewGaugeFunc registers an unlabelled gauge whose value fn gives at scrape time.
func (r *Registry) NewGaugeFunc(name, help string, fn func() float64) {
	r.add(&family{name: name, help: help, kind: kindGauge, fn: fn})
}

// NewCounterFunc registers an unlabelled counter whose value fn gives at scrape time.
func (r *Registry) NewCounterFunc(name, help string, fn func() float64) {
	r.add(&family{name: name, help: help, kind: kindCounter, fn: fn})
}

// NewHistogram registers a histogram family with the given upper bounds (ascending).
func (r *Registry) NewHistogram(name, help string, buckets []float64, labels ...string) *HistogramVec {
	return &HistogramVec{r.add(&family{name: name, help: help, kind: kindHistogram, labels: labels, buckets: buckets})}
}

func (f *family) get(values []string) *series {
	if len(values) != len(f.labels) {
		panic(fmt.Sprintf("metrics: %s wants %d label values, got %d", f.name, len(f.labels), len(values)))
	}
	values = boundValues(values)
	var buf [256]byte // the key is built on the stack: a lookup of a known series allocates nothing
	k := seriesKey(buf[:0], values)
	f.mu.RLock()
	s := f.series[string(k)]
	f.mu.RUnlock()
	if s != nil {
		return s
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	key := string(k)
	if s = f.series[key]; s != nil {
		return s
	}
	limit := MaxSeries
	if f.kind == kindHistogram {
		limit = MaxHistogramSeries
	}
	if len(f.series) >= limit {
		values = make([]string, len(f.labels))
		for i := range values {
			values[i] = "other"
		}
		key = strings.Join(values, "\xff")
		if s = f.series[key]; s != nil {
			return s
		}
	}
	s = &series{values: slices.Clone(values)}
	if f.kind == kindHistogram {
		s.counts = make([]atomic.Uint64, len(f.buckets)+1)
	}
	f.series[key] = s
	return s
}

// seriesKey appends a series' map key: its label values joined by 0xff, a byte no value holds.
func seriesKey(b []byte, values []string) []byte {
	for i, v := range values {
		if i > 0 {
			b = append(b, 0xff)
		}
		b = append(b, v...)
	}
	return b
}

func addFloat(u *atomic.Uint64, d float64) {
	for {
		old := u.Load()
		if u.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+d)) {
			return
		}
	}
}

// Add adds d (≥ 0) to the counter with these label values.
func (c *CounterVec) Add(d float64, values ...string) { addFloat(&c.f.get(values).bits, d) }

// Inc adds one.
func (c *CounterVec) Inc(values ...string) { c.Add(1, values...) }

// Counter is one series of a CounterVec, looked up once: adding to it is one atomic operation.
type Counter struct{ s *series }

// With returns the series with these label values, for a caller that adds to it often.
func (c *CounterVec) With(values ...string) Counter { return Counter{c.f.get(values)} }

// Add adds d (≥ 0).
func (c Counter) Add(d float64) { addFloat(&c.s.bits, d) }

// Value returns the counter's value (for tests and benchmarks).
func (c *CounterVec) Value(values ...string) float64 {
	return math.Float64frombits(c.f.get(values).bits.Load())
}

// Set sets the gauge.
func (g *GaugeVec) Set(v float64, values ...string) { g.f.get(values).bits.Store(math.Float64bits(v)) }

// Add adds d (may be negative) to the gauge.
func (g *GaugeVec) Add(d float64, values ...string) { addFloat(&g.f.get(values).bits, d) }

// Observe records one value.
func (h *HistogramVec) Observe(v float64, values ...string) {
	s := h.f.get(values)
	i, _ := slices.BinarySearch(h.f.buckets, v)
	s.counts[i].Add(1)
	addFloat(&s.sum, v)
}

// WriteTo writes every family in the text exposition format, families and series in a stable order.
func (r *Registry) WriteTo(w io.Writer) (int64, error) {
	r.mu.Lock()
	fams := slices.Clone(r.families)
	r.mu.Unlock()
	slices.SortFunc(fams, func(a, b *family) int { return strings.Compare(a.name, b.name) })
	var b strings.Builder
	for _, f := range fams {
		f.write(&b)
	}
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}

func (f *family) write(b *strings.Builder) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", f.name, escapeHelp(f.help), f.name, f.kind)
	if f.fn != nil {
		fmt.Fprintf(b, "%s %s\n", f.name, formatFloat(f.fn()))
		return
	}
	f.mu.RLock()
	all := make([]*series, 0, len(f.series))
	for _, s := range f.series {
		all = append(all, s)
	}
	f.mu.RUnlock()
	slices.SortFunc(all, func(a, b *series) int { return slices.Compare(a.values, b.values) })
	for _, s := range all {
		if f.kind != kindHistogram {
			fmt.Fprintf(b, "%s%s %s\n", f.name, f.labelText(s.values, ""), formatFloat(math.Float64frombits(s.bits.Load())))
			continue
		}
		var cum uint64
		for i, ub := range f.buckets {
			cum += s.counts[i].Load()
			fmt.Fprintf(b, "%s_bucket%s %d\n", f.name, f.labelText(s.values, formatFloat(ub)), cum)
		}
		cum += s.counts[len(f.buckets)].Load()
		fmt.Fprintf(b, "%s_bucket%s %d\n", f.name, f.labelText(s.values, "+Inf"), cum)
		fmt.Fprintf(b, "%s_sum%s %s\n", f.name, f.labelText(s.values, ""), formatFloat(math.Float64frombits(s.sum.Load())))
		fmt.Fprintf(b, "%s_count%s %d\n", f.name, f.labelText(s.values, ""), cum)
	}
}

func (f *family) labelText(values []string, le string) string {
	if len(values) == 0 && le == "" {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, name := range f.labels {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(name)
		b.WriteString(`="`)
		b.WriteString(escapeValue(values[i]))
		b.WriteByte('"')
	}
	if le != "" {
		if len(f.labels) > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`le="`)
		b.WriteString(le)
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

var (
	valueEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

func escapeValue(s string) string { return valueEscaper.Replace(s) }
func escapeHelp(s string) string  { return helpEscaper.Replace(s) }

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
