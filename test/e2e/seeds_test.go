package e2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"nodehub/e2e/harness"
)

// TestCaptureFuzzSeeds writes real kube-apiserver answers (lists, objects and watch streams, in
// JSON and protobuf) into the repository's wire/testdata/real, the seeds of the wire fuzz
// targets, and cluster-info into node/certs/testdata. It runs only with NODEHUB_CAPTURE_SEEDS=1; the files are committed.
func TestCaptureFuzzSeeds(t *testing.T) {
	if os.Getenv("NODEHUB_CAPTURE_SEEDS") != "1" {
		t.Skip("NODEHUB_CAPTURE_SEEDS=1 captures the fuzz seeds")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns = "seeds"
	if err := cluster.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	a := cluster.Admin
	port, proto := int32(80), corev1.ProtocolTCP
	node := "edge-1"
	for _, name := range []string{"web", "db"} {
		a.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
			Data: map[string]string{"config.yaml": "a: 1\nb: \"x\\ty\"\n"}, BinaryData: map[string][]byte{"bin": {0, 1, 2, 0xff}}}, metav1.CreateOptions{})
		a.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"openyurt.io/topologyKeys": "openyurt.io/nodepool"}},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name}, Ports: []corev1.ServicePort{{Port: port, Protocol: proto}}}}, metav1.CreateOptions{})
		a.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, NodeName: &node}},
			Ports: []discoveryv1.EndpointPort{{Port: &port}}}, metav1.CreateOptions{})
		a.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox", Env: []corev1.EnvVar{{Name: "KUBERNETES_SERVICE_HOST", Value: "10.96.0.1"}}}}}}, metav1.CreateOptions{})
	}
	rt, err := rest.TransportFor(cluster.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(harness.RepoRoot(), "wire", "testdata", "real")
	os.MkdirAll(dir, 0o755)
	get := func(file, path, accept string, watch bool) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(rctx, "GET", cluster.APIServers[0].URL+path, nil)
		req.Header.Set("Accept", accept)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if watch {
			// The first events of a watch from the list's start, then whatever came in 2 s.
			go func() { time.Sleep(2 * time.Second); cancel() }()
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || len(b) == 0 {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
		if err := os.WriteFile(filepath.Join(dir, file), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const pb, js = "application/vnd.kubernetes.protobuf", "application/json"
	base := "/api/v1/namespaces/" + ns
	get("pods-list.json", base+"/pods", js, false)
	get("pods-list.pb", base+"/pods", pb, false)
	get("pod-object.json", base+"/pods/web", js, false)
	get("pod-object.pb", base+"/pods/web", pb, false)
	get("configmap-object.json", base+"/configmaps/web", js, false)
	get("configmap-object.pb", base+"/configmaps/web", pb, false)
	get("service-object.pb", base+"/services/web", pb, false)
	get("endpointslices-list.pb", "/apis/discovery.k8s.io/v1/namespaces/"+ns+"/endpointslices", pb, false)
	get("endpointslice-object.json", "/apis/discovery.k8s.io/v1/namespaces/"+ns+"/endpointslices/web-x", js, false)
	get("configmaps-watch.json", base+"/configmaps?watch=1&resourceVersion=0&allowWatchBookmarks=true", js, true)
	get("configmaps-watch.pb", base+"/configmaps?watch=1&resourceVersion=0&allowWatchBookmarks=true", pb, true)
	get("services-watch.pb", base+"/services?watch=1&resourceVersion=0", pb, true)
	startControllerManager(t, 0) // the bootstrap signer signs cluster-info
	if err := cluster.SetupJoin(ctx, "seedss", "0123456789abcdef"); err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(harness.RepoRoot(), "node", "certs", "testdata")
	os.MkdirAll(dir, 0o755)
	get("cluster-info.json", "/api/v1/namespaces/kube-public/configmaps/cluster-info", js, false)
}
