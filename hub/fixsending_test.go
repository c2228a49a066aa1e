package hub

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"nodehub/hub/remote"
)

// Issue 30, the hub's side: from the moment kubelet's status write of a pod being corrected
// leaves for the cloud, the cloud's slice at the address kubelet reported passes as the cloud
// says — the controller's slice may reach the hub before the write's answer does, and a watch
// from the cloud would keep it corrected with the older report.
func TestStatusWriteOnItsWayLetsTheCloudsSlicePass(t *testing.T) {
	f := newProxyFixture(t, nil)
	if a := f.do(t, http.MethodGet, "/api/v1/namespaces/default/pods/web", kubelet, "", ""); a.code != http.StatusOK {
		t.Fatalf("online get: %d %s", a.code, a.body)
	}
	f.offline(t)
	notReady := `{"status":{"podIP":"10.0.0.11","podIPs":[{"ip":"10.0.0.11"}],"conditions":[{"type":"Ready","status":"False"}]}}`
	if a := f.do(t, http.MethodPatch, "/api/v1/namespaces/default/pods/web/status", kubelet, "", notReady); a.code != http.StatusOK {
		t.Fatalf("kubelet's offline status write: %d %s", a.code, a.body)
	}
	fix := f.hub.fix
	cloudSlice := []byte(`{"kind":"EndpointSlice","apiVersion":"discovery.k8s.io/v1","metadata":{"name":"web-abc","namespace":"default","resourceVersion":"9"},` +
		`"addressType":"IPv4","endpoints":[{"addresses":["10.0.0.11"],"conditions":{"ready":true,"serving":true,"terminating":false},` +
		`"nodeName":"node-a","targetRef":{"kind":"Pod","namespace":"default","name":"web","uid":"u1"}}]}`)
	serve := func(raw []byte) string {
		fn := fix.NewWatch().Served()
		if fn == nil {
			return string(raw) // nothing corrected
		}
		return string(fn(raw))
	}
	served := func() string { return serve(cloudSlice) }
	// The slice as the cloud had it before the outage: web at its old address.
	old := strings.NewReplacer(`"resourceVersion":"9"`, `"resourceVersion":"8"`, `10.0.0.11`, `10.0.0.1`).Replace(string(cloudSlice))
	if got := serve([]byte(old)); !strings.Contains(got, `"ready":false`) || !strings.Contains(got, `10.0.0.11`) {
		t.Fatalf("offline: web not corrected: %s", got)
	}
	f.hub.state.set(remote.Healthy)
	fix.SetOnline(true, time.Now())

	var during string
	f.cloud.mu.Lock()
	f.cloud.handle = func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.HasSuffix(r.URL.Path, "/pods/web/status") {
			return false
		}
		// The cloud has kubelet's write: its controller's slice says web ready, and reaches the
		// hub before this answer.
		during = served()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, strings.Replace(podWeb, `"spec"`, `"status":{"podIP":"10.0.0.11","podIPs":[{"ip":"10.0.0.11"}],"conditions":[{"type":"Ready","status":"True"}]},"spec"`, 1))
		return true
	}
	f.cloud.mu.Unlock()
	ready := strings.Replace(notReady, `"False"`, `"True"`, 1)
	if a := f.do(t, http.MethodPatch, "/api/v1/namespaces/default/pods/web/status", kubelet, "", ready); a.code != http.StatusOK {
		t.Fatalf("kubelet's status write online: %d %s", a.code, a.body)
	}
	if during != string(cloudSlice) {
		t.Fatalf("while kubelet's write was on its way the cloud's slice was served as\n%s\nwant the cloud's bytes", during)
	}
	if got := served(); got != string(cloudSlice) {
		t.Fatalf("after the answer: %s", got)
	}
}
