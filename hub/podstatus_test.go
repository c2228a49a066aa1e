package hub

import (
	"net/http"
	"strings"
	"testing"

	"nodehub/cache"
	"nodehub/hub/endpointfix"
	"nodehub/wire"
)

const forgedPodIP = `{"status":{"podIP":"10.66.6.6","podIPs":[{"ip":"10.66.6.6"}],"conditions":[{"type":"Ready","status":"True"}]}}`

// Offline, a pod whose own cache holds the node's pod (its ServiceAccount may read pods) sends a
// status write in kubelet's User-Agent with its bearer token: refused with a Status, and the
// endpoint corrections hear nothing of it. The node's kubelet's write is its report.
func TestOfflinePodStatusWriteOfAPodIsNoReport(t *testing.T) {
	f := newProxyFixture(t, nil)
	const tok = "Bearer a-pods-token"
	for _, auth := range []string{tok, ""} { // the pod's cache and kubelet's hold the pod
		if a := f.do(t, http.MethodGet, "/api/v1/namespaces/default/pods/web", kubelet, auth, ""); a.code != http.StatusOK {
			t.Fatalf("online get (auth %q): %d %s", auth, a.code, a.body)
		}
	}
	f.offline(t)
	if f.hub.fix == nil {
		t.Fatal("no endpoint fixer")
	}
	for _, method := range []string{http.MethodPatch, http.MethodPut} {
		body := forgedPodIP
		if method == http.MethodPut {
			body = strings.Replace(podWeb, `"spec"`, `"status":{"podIP":"10.66.6.6"},"spec"`, 1)
		}
		a := f.do(t, method, "/api/v1/namespaces/default/pods/web/status", kubelet, tok, body)
		if a.code != http.StatusServiceUnavailable || !strings.Contains(a.body, `"kind":"Status"`) || !strings.Contains(a.body, "only the node's kubelet may report pod status offline") {
			t.Fatalf("offline %s of pods/status with a pod's token: %d %s, want the 503 Status", method, a.code, a.body)
		}
	}
	if n := f.hub.fix.Pods(); n != 0 || f.hub.fix.Active() {
		t.Fatalf("the fixer took %d reports from a pod's writes", n)
	}
	if string(f.hub.fix.Shared()) != "[]" {
		t.Fatalf("the pool's note would carry %s", f.hub.fix.Shared())
	}
	if a := f.do(t, http.MethodGet, "/api/v1/namespaces/default/pods/web", kubelet, tok, ""); a.code != http.StatusOK || strings.Contains(a.body, "10.66.6.6") {
		t.Fatalf("the pod's own cached copy: %d %s", a.code, a.body)
	}

	// The node's kubelet reports.
	a := f.do(t, http.MethodPatch, "/api/v1/namespaces/default/pods/web/status", kubelet, "", `{"status":{"podIP":"10.0.0.11","podIPs":[{"ip":"10.0.0.11"}]}}`)
	if a.code != http.StatusOK || !strings.Contains(a.body, "10.0.0.11") {
		t.Fatalf("kubelet's offline status write: %d %s", a.code, a.body)
	}
	if n := f.hub.fix.Pods(); n != 1 || !strings.Contains(string(f.hub.fix.Shared()), "10.0.0.11") {
		t.Fatalf("kubelet's report: %d pods, shared %s", n, f.hub.fix.Shared())
	}
}

// At start, the Fixer takes the offline copies of kubelet's own cache alone: a copy marked local
// in any other cache (a pod's, another node client's) is no report.
func TestStartReportsOnlyFromKubeletsCache(t *testing.T) {
	f := newProxyFixture(t, nil)
	st := f.hub.cache.Store
	put := func(owner, name, ip string) {
		t.Helper()
		raw := strings.NewReplacer(`"web"`, `"`+name+`"`, `"spec"`, `"status":{"podIP":"`+ip+`"},"spec"`).Replace(podWeb)
		m, err := wire.ExtractMeta([]byte(raw), "pods")
		if err != nil {
			t.Fatal(err)
		}
		h := cache.Header{ContentType: wire.MediaJSON, APIVersion: m.APIVersion, Kind: m.Kind, Namespace: m.Namespace, Name: m.Name,
			UID: m.UID, ResourceVersion: m.ResourceVersion, Fields: m.Fields, Local: true}
		if err := st.Put(cache.Key{Resource: cache.Resource{Owner: owner, Version: "v1", Resource: "pods"}, Namespace: m.Namespace, Name: m.Name}, &h, []byte(raw)); err != nil {
			t.Fatal(err)
		}
	}
	put("kubelet@sa-hash", "forged-by-pod", "10.66.6.6")
	put("kubectl", "forged-by-node-client", "10.66.6.7")
	put("kubelet", "reported", "10.0.0.11")
	f.hub.fix = endpointfix.New("node-a", 0, f.hub.log)
	f.hub.loadReports()
	if got := string(f.hub.fix.Shared()); f.hub.fix.Pods() != 1 || !strings.Contains(got, `"reported"`) || strings.Contains(got, "10.66.6.") {
		t.Fatalf("reports at start: %s, want kubelet's alone", got)
	}
}
