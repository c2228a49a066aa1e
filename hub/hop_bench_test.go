package hub

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"nodehub/hub/lane"
	"nodehub/wire"
)

// The hop's cost per proxied read, against a loopback fake cloud (TLS, as the apiserver): a
// plain client's GET of the node (JSON), kubelet's GET of its node (protobuf, with the Autonomy
// condition the hub wrote, as in bench's latency section) and kubelet's LIST of its 110 pods
// (protobuf, gzip as the apiserver sends an answer over 128 KiB to a client that accepts it,
// through its filters and into the cache). Each has a "direct" twin, the same request to the fake cloud
// itself: what the hub adds is hub − direct (allocs/op and B/op count the whole process: client,
// hub, cache writer and fake cloud; so does cpu-ns/op, the process's CPU time per request).
//
//	go test -run '^$' -bench Hop -benchmem ./hub/

// hopBodies are the fake cloud's answers: a node as JSON and as protobuf, 110 pods as a protobuf
// list (plain and gzip).
type hopBodies struct{ node, nodePB, pods, podsGzip []byte }

func newHopBodies(b *testing.B) hopBodies {
	b.Helper()
	node := nodeA(5, "v1")
	list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "900"}}
	for i := 0; i < 110; i++ {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%03d", i), Namespace: "default", UID: types.UID(fmt.Sprint("u", i)),
			ResourceVersion: fmt.Sprint(100 + i), Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1",
				Env: []corev1.EnvVar{{Name: "A", Value: strings.Repeat("x", 1500)}}}}}}
		list.Items = append(list.Items, p)
	}
	pods, err := wire.EncodeProto("v1", "PodList", list)
	if err != nil {
		b.Fatal(err)
	}
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	_, _ = zw.Write(pods)
	_ = zw.Close()
	nodePB, err := wire.EncodeProto("v1", "Node", hopNode())
	if err != nil {
		b.Fatal(err)
	}
	return hopBodies{node: []byte(node), nodePB: nodePB, pods: pods, podsGzip: zipped.Bytes()}
}

// hopNode is node-a as the bench's cloud holds it: a few labels and conditions, and the Autonomy
// condition the hub wrote (False: the node is not annotated autonomous).
func hopNode() *corev1.Node {
	now := metav1.Now()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "n1", ResourceVersion: "5",
		Labels: map[string]string{"kubernetes.io/hostname": "node-a", "kubernetes.io/os": "linux"}}}
	for _, c := range []struct{ t, s, reason string }{{"Ready", "True", "KubeletReady"}, {"MemoryPressure", "False", "KubeletHasSufficientMemory"},
		{"DiskPressure", "False", "KubeletHasNoDiskPressure"}, {"Autonomy", "False", "autonomy disabled"}} {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeConditionType(c.t), Status: corev1.ConditionStatus(c.s),
			Reason: c.reason, Message: "the bench's condition " + c.t, LastHeartbeatTime: now, LastTransitionTime: now})
	}
	return n
}

func (h hopBodies) serve(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case r.URL.Path == "/api/v1/nodes/node-a" && r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(r.Header.Get("Accept"), wire.MediaProtobuf) {
			w.Header().Set("Content-Type", wire.MediaProtobuf)
			_, _ = w.Write(h.nodePB)
			return true
		}
		_, _ = w.Write(h.node)
	case r.URL.Path == "/api/v1/pods" && r.URL.Query().Get("watch") == "":
		w.Header().Set("Content-Type", wire.MediaProtobuf)
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") { // as the apiserver: over 128 KiB
			w.Header().Set("Content-Encoding", "gzip")
			_, _ = w.Write(h.podsGzip)
			return true
		}
		_, _ = w.Write(h.pods)
	default:
		return false
	}
	return true
}

func BenchmarkHopGetNode(b *testing.B) {
	benchHop(b, "/api/v1/nodes/node-a", "bench/1", "application/json")
}

func BenchmarkHopGetNodeKubelet(b *testing.B) {
	benchHop(b, "/api/v1/nodes/node-a", kubelet, wire.MediaProtobuf+", application/json")
}

func BenchmarkHopListPodsKubelet(b *testing.B) {
	benchHop(b, "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a", kubelet, wire.MediaProtobuf+", application/json")
}

func benchHop(b *testing.B, path, ua, accept string) {
	bodies := newHopBodies(b)
	f := newProxyFixture(b, func(c *Config) { c.Filters = filterConfig() })
	f.cloud.handle = bodies.serve
	hubClient := &http.Client{}
	cloudClient := f.cloud.srv.Client()
	// The direct twin presents the node's certificate, as the hub does.
	cloudClient.Transport.(*http.Transport).TLSClientConfig.GetClientCertificate = newTLSNodeCreds(b, f.cloud.srv).GetClientCertificate
	for _, c := range []struct {
		name string
		cl   *http.Client
		base string
	}{{"direct", cloudClient, f.cloud.srv.URL}, {"hub", hubClient, f.url}, {"lane", hubClient, laneFront(b, f.hub)}} {
		b.Run(c.name, func(b *testing.B) {
			n := hopGet(b, c.cl, c.base+path, ua, accept) // the connections are open before the clock starts
			if f.hub.cache != nil {
				_ = f.hub.cache.Writer.Flush(b.Context()) // and the answer cached: the steady state
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU(b)
			for i := 0; i < b.N; i++ {
				hopGet(b, c.cl, c.base+path, ua, accept)
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(n), "body-bytes")
		})
	}
	if f.hub.cache != nil {
		_ = f.hub.cache.Writer.Flush(b.Context())
	}
}

// processCPU is the CPU time the process used so far (user and system, every thread): per request,
// a figure a loaded machine moves less than the wall time.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func hopGet(b *testing.B, cl *http.Client, url, ua, accept string) int64 {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("User-Agent", ua)
	req.Header.Set("Accept", accept)
	resp, err := cl.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || n == 0 {
		b.Fatalf("%s: %d, %d bytes, %v", url, resp.StatusCode, n, err)
	}
	return n
}

// laneFront serves s's pipeline on a loopback port through the proxy ports' lane (hub/lane), as
// Run does; its URL.
func laneFront(b *testing.B, s *Server) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hs := s.newHTTPServer(b.Context(), s.pipe)
	l := lane.New(b.Context(), hs, s.log, ln.Addr())
	done := make(chan error, 1)
	go func() { done <- l.Serve(ln) }()
	b.Cleanup(func() {
		ln.Close()
		l.Shutdown(context.Background())
		<-done
	})
	return "http://" + ln.Addr().String()
}
