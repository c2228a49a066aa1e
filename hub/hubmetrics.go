package hub

import (
	"crypto/tls"
	"crypto/x509"
	"math"
	"strconv"

	"nodehub/cache"
	"time"

	"nodehub/hub/metrics"
	"nodehub/hub/remote"
	"nodehub/wire"
)

// hubMetrics are the hub's /metrics families.
type hubMetrics struct {
	reg           *metrics.Registry
	healthy       *metrics.GaugeVec
	upstreamReqs  *metrics.CounterVec
	reaches       *metrics.CounterVec
	inflightGauge *metrics.GaugeVec
	requests      *metrics.CounterVec
	latency       *metrics.HistogramVec
	cloudBytes    *metrics.CounterVec
	purposeBytes  *metrics.CounterVec // cloud bytes by purpose and direction
	nodeFromWatch *metrics.CounterVec
	leaseRenewals *metrics.CounterVec
	cacheDropped  *metrics.CounterVec
	cacheErrors   *metrics.CounterVec
	offline       *metrics.CounterVec
	filterErrors  *metrics.CounterVec
	filterActions *metrics.CounterVec
	throttled     *metrics.CounterVec
	cacheFull     *metrics.CounterVec
	unauthorized  *metrics.CounterVec
	refusedConns  *metrics.CounterVec
	dummyEnsures  *metrics.CounterVec
	otaActions    *metrics.CounterVec
	yurthub       *yurthubMetrics // the same events under YurtHub's names (yurthubmetrics.go)
}

func newHubMetrics(reg *metrics.Registry) *hubMetrics {
	m := &hubMetrics{
		reg:           reg,
		healthy:       reg.NewGauge("nodehub_server_healthy", "Whether the cloud server is healthy (1) or not (0).", "server"),
		upstreamReqs:  reg.NewCounter("nodehub_upstream_requests_total", "Requests sent to each cloud server, by result (ok: an HTTP answer came back; error: it did not).", "server", "result"),
		inflightGauge: reg.NewGauge("nodehub_inflight_requests", "Requests being served on the proxy port."),
		requests:      reg.NewCounter("nodehub_requests_total", "Requests served on the proxy port.", "verb", "resource", "component", "code"),
		latency: reg.NewHistogram("nodehub_request_duration_seconds", "Time to serve a request on the proxy port (watches and upgrades excluded).",
			[]float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}, "verb", "resource", "component"),
		cloudBytes:    reg.NewCounter("nodehub_cloud_received_bytes_total", "Response body bytes received from the cloud.", "component", "resource"),
		leaseRenewals: reg.NewCounter("nodehub_node_lease_renewals_total", "Renewals of the node lease in the cloud by result.", "result"),
		cacheDropped:  reg.NewCounter("nodehub_cache_dropped_total", "Response chunks not cached because the writer queues were full (the resource's lists are marked incomplete).", "resource"),
		cacheErrors:   reg.NewCounter("nodehub_cache_errors_total", "Failed cache writes and unparsable cached responses.", "resource"),
		offline:       reg.NewCounter("nodehub_offline_requests_total", "Requests answered by the local (offline) proxy, by verb.", "verb"),
		filterErrors:  reg.NewCounter("nodehub_filter_errors_total", "Objects a filter failed on (passed on unchanged), by filter.", "filter"),
		filterActions: reg.NewCounter("nodehub_filter_objects_total", "Objects filters changed or removed, by filter and action.", "filter", "action"),
		cacheFull:     reg.NewCounter("nodehub_cache_full_skipped_total", "New objects not cached because the cache reached --cache-max-bytes.", "resource"),
		throttled:     reg.NewCounter("nodehub_throttled_requests_total", "Requests answered 429 because --max-requests-in-flight were being served, by budget (node: the node's own clients over loopback; others).", "budget"),
		unauthorized:  reg.NewCounter("nodehub_unauthorized_requests_total", "Requests refused with 401 because they carried no token where the node's identity is never lent: the secure port, or the plain port from a non-loopback address.", "port"),
	}
	m.purposeBytes = reg.NewCounter("nodehub_cloud_bytes_total", "Body bytes exchanged with the cloud, by purpose (proxied: the clients' requests; heartbeat: the node lease's renewals; pool: the shared stores and the election; own: the hub's other reads and writes; certs: the node's certificates: cluster-info, CSRs) and direction (received: cloud to edge; sent: edge to cloud).", "purpose", "direction")
	m.nodeFromWatch = reg.NewCounter("nodehub_node_reads_from_watch_total", "kubelet's GETs of its node answered from the copy a live watch of the node keeps current, instead of the cloud.")
	m.reaches = reg.NewCounter("nodehub_server_reach_probes_total", "Reaches sent to a cloud server because a request to it had no answer after 0.3 s or failed (a new connection's TLS handshake; a failed one takes the server offline), by result (ok, failed).", "server", "result")
	m.refusedConns = reg.NewCounter("nodehub_refused_connections_total", "Connections closed at once because one address (or all that are not loopback) held the most a port keeps open, by port.", "port")
	m.dummyEnsures = reg.NewCounter("nodehub_dummy_if_ensures_total", "Checks (and repairs) of the hub's link and address, by result (ok, error).", "result")
	m.otaActions = reg.NewCounter("nodehub_ota_actions_total", "Upgrade and imagepull requests on the hub API, by action and answer code.", "action", "code")
	m.inflightGauge.Set(0)
	m.yurthub = newYurtHubMetrics(reg, func() float64 { return m.throttled.Value("node") + m.throttled.Value("others") })
	return m
}

// watchCerts registers the seconds left until the node's client certificate and the hub's
// serving certificate expire (negative: expired; absent while none is loaded).
func (m *hubMetrics) watchCerts(client func(*tls.CertificateRequestInfo) (*tls.Certificate, error), serving func(*tls.ClientHelloInfo) (*tls.Certificate, error)) {
	left := func(c *tls.Certificate, err error) float64 {
		if err != nil || c == nil || len(c.Certificate) == 0 {
			return math.NaN()
		}
		leaf := c.Leaf
		if leaf == nil {
			if leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
				return math.NaN()
			}
		}
		return time.Until(leaf.NotAfter).Seconds()
	}
	m.reg.NewGaugeFunc("nodehub_client_certificate_expiry_seconds", "Seconds until the node's client certificate expires (NaN: none loaded).", func() float64 { return left(client(nil)) })
	if serving != nil {
		m.reg.NewGaugeFunc("nodehub_serving_certificate_expiry_seconds", "Seconds until the secure port's certificate expires (NaN: none yet).", func() float64 { return left(serving(nil)) })
	}
}

// dummyEnsured counts one check (and repair) of the hub's link and address.
func (m *hubMetrics) dummyEnsured(err error) {
	if err != nil {
		m.dummyEnsures.Inc("error")
		return
	}
	m.dummyEnsures.Inc("ok")
}

// watchCache registers the gauges that read the cache's own counters at scrape time.
func (m *hubMetrics) watchCache(c *cache.Manager) {
	m.reg.NewGaugeFunc("nodehub_cache_bytes", "Bytes the cache's files take.", func() float64 { return float64(c.Store.Size()) })
	m.reg.NewGaugeFunc("nodehub_cache_max_bytes", "The --cache-max-bytes limit (0: none).", func() float64 { return float64(c.Writer.MaxBytes) })
	m.reg.NewGaugeFunc("nodehub_cache_queued_bytes", "Bytes waiting in the cache writer queues.", func() float64 { return float64(c.Writer.Queued()) })
	m.reg.NewGaugeFunc("nodehub_cache_writer_busy_queues", "Cache writer queues with data not yet written to the files (0: everything teed so far is written).", func() float64 { return float64(c.Writer.Busy()) })
	m.reg.NewCounterFunc("nodehub_cache_syncs_total", "sync rounds that made cache writes durable (an fdatasync of each log written since the last).", func() float64 { return float64(c.Store.Stats().Syncs) })
	m.reg.NewCounterFunc("nodehub_cache_written_bytes_total", "Bytes written to cache files.", func() float64 { return float64(c.Store.Stats().BytesWritten) })
	m.reg.NewCounterFunc("nodehub_cache_files_written_total", "Cache records (and discovery files) written.", func() float64 { return float64(c.Store.Stats().FilesWritten) })
	m.reg.NewCounterFunc("nodehub_cache_compaction_written_bytes_total", "Bytes the compaction of cache logs wrote.", func() float64 { return float64(c.Store.Stats().CompactedBytes) })
	m.reg.NewGaugeFunc("nodehub_cache_read_only", "1 when the cache directory cannot be written.", func() float64 {
		if ro, _ := c.Store.ReadOnly(); ro {
			return 1
		}
		return 0
	})
}

func (m *hubMetrics) serverHealth(b *remote.Backend, healthy bool) {
	v := 0.0
	if healthy {
		v = 1
	}
	m.healthy.Set(v, b.Name)
	m.yurthub.healthy.Set(v, b.Name)
}

// reach counts a reach's outcome (remote.Checker.OnReach).
func (m *hubMetrics) reach(b *remote.Backend, err error) {
	result := "ok"
	if err != nil {
		result = "failed"
	}
	m.reaches.Inc(b.Name, result)
}

func (m *hubMetrics) upstream(b *remote.Backend, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.upstreamReqs.Inc(b.Name, result)
}

func resourceLabel(ri *wire.RequestInfo) string {
	if !ri.IsResource {
		return "nonresource"
	}
	if ri.Subresource != "" {
		return ri.Resource + "/" + ri.Subresource
	}
	return ri.Resource
}

func componentLabel(ri *wire.RequestInfo) string {
	if ri.Component == "" {
		return "unknown"
	}
	return ri.Component
}

// inflight adds d (+1 when a request starts, -1 when it ends) to the in-flight gauges.
func (m *hubMetrics) inflight(ri *wire.RequestInfo, d float64) {
	m.inflightGauge.Add(d)
	m.yurthub.inflightAdd(ri, d)
}

// knownVerbs are the verb label's values; any other method a client invents is "other".
var knownVerbs = map[string]bool{
	wire.VerbGet: true, wire.VerbList: true, wire.VerbWatch: true, wire.VerbCreate: true, wire.VerbUpdate: true,
	wire.VerbPatch: true, wire.VerbDelete: true, wire.VerbDeleteCollection: true, wire.VerbProxy: true,
	"head": true, "options": true,
}

func verbLabel(verb string) string {
	if knownVerbs[verb] {
		return verb
	}
	return "other"
}

func (m *hubMetrics) request(ri *wire.RequestInfo, code int, d time.Duration) {
	res, comp, verb := resourceLabel(ri), componentLabel(ri), verbLabel(ri.Verb)
	m.requests.Inc(verb, res, comp, strconv.Itoa(code))
	if ri.Verb != wire.VerbWatch && code != 101 {
		m.latency.Observe(d.Seconds(), verb, res, comp)
	}
}

// cloudBytesFunc counts one answer's bytes as they stream (one call per read): its series are
// looked up at the first byte, then each read adds to them.
func (m *hubMetrics) cloudBytesFunc(ri *wire.RequestInfo) func(int) {
	var series []metrics.Counter
	return func(n int) {
		if series == nil {
			res, comp, verb := resourceLabel(ri), componentLabel(ri), verbLabel(ri.Verb)
			series = []metrics.Counter{m.purposeBytes.With("proxied", "received"), m.cloudBytes.With(comp, res),
				m.yurthub.traffic.With(comp, verb, ri.Resource, ri.Subresource)}
		}
		for _, c := range series {
			c.Add(float64(n))
		}
	}
}

// purposeFunc counts body bytes of one purpose and direction (nodehub_cloud_bytes_total).
func (m *hubMetrics) purposeFunc(purpose, direction string) func(int) {
	c := m.purposeBytes.With(purpose, direction)
	return func(n int) { c.Add(float64(n)) }
}
