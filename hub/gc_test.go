package hub

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// The GC's re-list of kubelet's pods is kept as the proxy keeps kubelet's own list: through its
// filter chain (serviceenvupdater points the pods' KUBERNETES_SERVICE_HOST at the hub), so
// offline kubelet reads the same pods it read online.
func TestRelistNodePodsKeepsTheFilteredAnswer(t *testing.T) {
	const env = `"env":[{"name":"KUBERNETES_SERVICE_HOST","value":"10.96.0.1"},{"name":"KUBERNETES_SERVICE_PORT","value":"443"}]`
	pod := strings.Replace(podWeb, `"spec":{"nodeName":"node-a"}`, `"spec":{"nodeName":"node-a","containers":[{"name":"c","image":"i",`+env+`}]}`, 1)
	f := newProxyFixture(t, func(c *Config) { c.Filters = filterConfig() })
	f.cloud.handle = func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/api/v1/pods" || r.URL.Query().Get("watch") != "" {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[`+pod+`]}`)
		return true
	}
	if err := f.hub.relistNodePods(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.cloud.took(); len(got) != 1 || !strings.HasPrefix(got[0].ua, "kubelet/") {
		t.Fatalf("the cloud got %+v", got)
	}
	f.offline(t)
	a := f.do(t, http.MethodGet, "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a", kubelet, "", "")
	if a.code != http.StatusOK || !strings.Contains(a.body, `"name":"web"`) {
		t.Fatalf("offline list: %d %s", a.code, a.body)
	}
	if !strings.Contains(a.body, `"value":"169.254.2.1"`) || strings.Contains(a.body, `"value":"10.96.0.1"`) {
		t.Fatalf("offline, kubelet's pods are the cloud's, not filtered: %s", a.body)
	}
}
