package hub

import (
	"nodehub/hub/metrics"
	"nodehub/wire"
)

// yurthubMetrics are YurtHub v1.7's /metrics families under YurtHub's own names and labels, beside
// nodehub's, so the dashboards and alerts operators have for YurtHub keep working. Each is fed by
// the same event as its nodehub twin (named in its help). YurtHub's names break two Prometheus
// naming conventions (a gauge ending in _total, counters without it); they are kept as YurtHub
// has them. YurtHub's node_yurthub_closable_conns_collector (TCP connections per server) has no
// nodehub source and is not offered.
type yurthubMetrics struct {
	healthy       *metrics.GaugeVec   // node_yurthub_server_healthy_status{server}
	inflight      *metrics.GaugeVec   // node_yurthub_in_flight_requests_collector{verb,resource,subresources,client}
	inflightTotal *metrics.GaugeVec   // node_yurthub_in_flight_requests_total
	traffic       *metrics.CounterVec // node_yurthub_proxy_traffic_collector{client,verb,resource,subresources}
}

func newYurtHubMetrics(reg *metrics.Registry, rejected func() float64) *yurthubMetrics {
	m := &yurthubMetrics{
		healthy:       reg.NewGauge("node_yurthub_server_healthy_status", "YurtHub's name: healthy status of remote servers. 1: healthy, 0: unhealthy (nodehub_server_healthy).", "server"),
		inflight:      reg.NewGauge("node_yurthub_in_flight_requests_collector", "YurtHub's name: requests being served on the proxy port by verb, resource, subresource and client (nodehub_inflight_requests).", "verb", "resource", "subresources", "client"),
		inflightTotal: reg.NewGauge("node_yurthub_in_flight_requests_total", "YurtHub's name: requests being served on the proxy port (nodehub_inflight_requests)."),
		traffic:       reg.NewCounter("node_yurthub_proxy_traffic_collector", "YurtHub's name: response bytes received from the cloud (nodehub_cloud_received_bytes_total).", "client", "verb", "resource", "subresources"),
	}
	reg.NewCounterFunc("node_yurthub_rejected_requests_counter", "YurtHub's name: requests rejected for exceeding the in-flight limit (nodehub_throttled_requests_total).", rejected)
	m.inflightTotal.Set(0)
	return m
}

// inflight adds d (+1 when a request starts, -1 when it ends) to the in-flight gauges.
func (m *yurthubMetrics) inflightAdd(ri *wire.RequestInfo, d float64) {
	m.inflight.Add(d, verbLabel(ri.Verb), ri.Resource, ri.Subresource, componentLabel(ri))
	m.inflightTotal.Add(d)
}
