package hub

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"nodehub/hub/metrics"
	"nodehub/hub/remote"
	"nodehub/wire"
)

// YurtHub's metric names are fed by the same events as nodehub's own.
func TestYurtHubMetricNamesBesideNodehubs(t *testing.T) {
	reg := metrics.NewRegistry()
	m := newHubMetrics(reg)
	m.serverHealth(&remote.Backend{Name: "10.0.0.1:6443"}, true)
	m.serverHealth(&remote.Backend{Name: "10.0.0.2:6443"}, false)
	get := &wire.RequestInfo{Verb: "get", IsResource: true, Resource: "pods", Subresource: "status", Component: "kubelet"}
	watch := &wire.RequestInfo{Verb: "watch", IsResource: true, Resource: "services", Component: "kube-proxy"}
	m.inflight(get, 1)
	m.inflight(watch, 1)
	m.inflight(get, -1)
	count := m.cloudBytesFunc(get) // one answer, read twice: its series looked up at the first
	count(100)
	count(23)
	m.throttled.Inc("node")
	m.throttled.Inc("node")
	var b bytes.Buffer
	if _, err := reg.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, want := range []string{
		"# TYPE node_yurthub_server_healthy_status gauge",
		`node_yurthub_server_healthy_status{server="10.0.0.1:6443"} 1`,
		`node_yurthub_server_healthy_status{server="10.0.0.2:6443"} 0`,
		"# TYPE node_yurthub_in_flight_requests_total gauge",
		"node_yurthub_in_flight_requests_total 1",
		`node_yurthub_in_flight_requests_collector{verb="watch",resource="services",subresources="",client="kube-proxy"} 1`,
		`node_yurthub_in_flight_requests_collector{verb="get",resource="pods",subresources="status",client="kubelet"} 0`,
		"# TYPE node_yurthub_proxy_traffic_collector counter",
		`node_yurthub_proxy_traffic_collector{client="kubelet",verb="get",resource="pods",subresources="status"} 123`,
		"# TYPE node_yurthub_rejected_requests_counter counter",
		"node_yurthub_rejected_requests_counter 2",
		// nodehub's own, unchanged
		`nodehub_server_healthy{server="10.0.0.1:6443"} 1`,
		"nodehub_inflight_requests 1",
		`nodehub_cloud_received_bytes_total{component="kubelet",resource="pods/status"} 123`,
		`nodehub_throttled_requests_total{budget="node"} 2`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed (make deps): format not checked here, the e2e test does")
		return
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	out, err := cmd.CombinedOutput()
	if err != nil && len(lintBeyondYurtHubNames(string(out))) > 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// lintBeyondYurtHubNames returns promtool's complaints other than the one YurtHub's names earn on
// purpose (naming conventions: the "_total" suffix, no type in the name).
func lintBeyondYurtHubNames(out string) []string {
	var bad []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line != "" && !(strings.HasPrefix(line, "node_yurthub_") && (strings.Contains(line, `"_total" suffix`) || strings.Contains(line, "should not include type"))) {
			bad = append(bad, line)
		}
	}
	return bad
}
