package local

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/cache"
	"nodehub/wire"
)

// kubeletPods caches n pods of edge-1 as kubelet's list of them (protobuf), as the hub does online.
// It returns the cache's directory too.
func kubeletPods(tb testing.TB, n int) (*Proxy, string) {
	dir := tb.TempDir()
	st, err := cache.Open(dir, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	res := cache.Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}
	var keys []string
	for i := 0; i < n; i++ {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%03d", i), Namespace: "default", UID: "0f3c1c2e-1111-2222-3333-444455556666",
			ResourceVersion: fmt.Sprint(100 + i), Labels: map[string]string{"app": "x"}},
			Spec:   corev1.PodSpec{NodeName: "edge-1", Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Env: []corev1.EnvVar{{Name: "A", Value: fmt.Sprintf("%0200d", i)}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: fmt.Sprintf("10.0.0.%d", i+1)}}
		raw, err := wire.EncodeProto("v1", "Pod", pod)
		if err != nil {
			tb.Fatal(err)
		}
		m, _ := wire.ExtractMeta(raw, "pods")
		h := &cache.Header{ContentType: wire.MediaProtobuf, APIVersion: "v1", Kind: "Pod", Namespace: m.Namespace, Name: m.Name, ResourceVersion: m.ResourceVersion,
			Labels: m.Labels, Fields: map[string]string{"spec.nodeName": "edge-1"}}
		if err := st.Put(cache.Key{Resource: res, Namespace: m.Namespace, Name: m.Name}, h, raw); err != nil {
			tb.Fatal(err)
		}
		keys = append(keys, "default/"+m.Name)
	}
	st.PutList(res, cache.ListRecord{FieldSelector: "spec.nodeName=edge-1", Complete: true, APIVersion: "v1", Kind: "Pod", ResourceVersion: "500", Keys: keys})
	return &Proxy{Store: st, NodeName: "edge-1"}, dir
}

// listPods is kubelet's offline LIST of its pods in protobuf.
func listPods(tb testing.TB, p *Proxy) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1", nil)
	r.Header.Set("Accept", "application/vnd.kubernetes.protobuf")
	r.Header.Set("User-Agent", "kubelet/v1.34.4")
	ri, err := wire.ParseRequest(r)
	if err != nil {
		tb.Fatal(err)
	}
	w := httptest.NewRecorder()
	p.ServeHTTP(w, r, &Request{Info: ri, Own: "kubelet", Shared: true})
	return w
}

// BenchmarkOfflineListPodsKubelet is kubelet's offline LIST of 110 pods in protobuf, from the
// request to the last byte of the answer.
func BenchmarkOfflineListPodsKubelet(b *testing.B) {
	p, _ := kubeletPods(b, 110)
	b.ReportAllocs()
	r0 := readBytes(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if w := listPods(b, p); w.Code != http.StatusOK {
			b.Fatal(w.Code)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(readBytes(b)-r0)/float64(b.N), "read-B/op")
}

// readBytes is what the process read by system calls so far (rchar of /proc/self/io): the
// cache's reads of its logs, here.
func readBytes(tb testing.TB) int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		tb.Skip(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "rchar: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// Kubelet's offline LIST of its pods reads the cache once, not three times (the check that
// kubelet may be given the list, the sizing pass, the writing pass), and answers every pod.
func TestKubeletsOfflineListReadsTheCacheOnce(t *testing.T) {
	p, dir := kubeletPods(t, 110)
	fi, err := os.Stat(filepath.Join(dir, ".logs", "pods.v1.core.log"))
	if err != nil {
		t.Fatal(err)
	}
	r0 := readBytes(t)
	w := listPods(t, p)
	read := readBytes(t) - r0
	var l corev1.PodList
	if _, _, err := wire.DecodeProto(w.Body.Bytes(), &l); w.Code != http.StatusOK || err != nil || len(l.Items) != 110 || l.ResourceVersion != "500" {
		t.Fatalf("%d %v: %d pods, rv %q", w.Code, err, len(l.Items), l.ResourceVersion)
	}
	if cl := w.Header().Get("Content-Length"); cl != fmt.Sprint(w.Body.Len()) {
		t.Fatalf("Content-Length %s for %d bytes", cl, w.Body.Len())
	}
	if read > fi.Size()*3/2 {
		t.Fatalf("%d bytes read for a list of %d bytes of records", read, fi.Size())
	}
}

// A pod list whose record names a pod the cache does not hold is never given to kubelet (the
// missing pod would be killed), also when the list is read whole.
func TestKubeletsGatheredListOfALostPodIsRefused(t *testing.T) {
	p, _ := kubeletPods(t, 3)
	res := cache.Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}
	p.Store.PutList(res, cache.ListRecord{FieldSelector: "spec.nodeName=edge-1", Complete: true, APIVersion: "v1", Kind: "Pod", ResourceVersion: "500",
		Keys: []string{"default/pod-000", "default/pod-001", "default/pod-002", "default/gone"}})
	if w := listPods(t, p); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("%d, want 503", w.Code)
	}
}

// Kubelet's offline LIST of 110 pods allocates little per pod: each is read once, and its
// header's strings are one allocation (was 74 allocations a pod; now 19).
func TestKubeletsOfflineListAllocatesLittlePerPod(t *testing.T) {
	p, _ := kubeletPods(t, 110)
	per := testing.AllocsPerRun(20, func() { listPods(t, p) }) / 110
	if per > 22 {
		t.Fatalf("%.1f allocations per pod listed", per)
	}
}
