package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/e2e/harness"
)

const kubeProxyUA = "kube-proxy/v1.34.4 (linux/arm64) kubernetes/bench"

// benchCache measures what caching costs: bytes written per watch event, syncs per second under
// a 100 events/s churn, and RSS with many objects cached.
func benchCache(e *env, o options) error {
	ctx := e.ctx
	err := e.c.BindNodes(ctx, "bench-reader", rbacv1.PolicyRule{APIGroups: []string{"", "discovery.k8s.io"},
		Resources: []string{"configmaps", "endpointslices"}, Verbs: []string{"get", "list", "watch"}})
	if err != nil {
		return err
	}
	ns := "benchcache"
	if err := e.c.EnsureNamespace(ctx, ns); err != nil {
		return err
	}
	h, err := e.startHub("--cache-agents=kubelet,kube-proxy,bench-agent", "--profiling")
	if err != nil {
		return err
	}
	defer h.Stop()

	// A 10-endpoint EndpointSlice is about 2 KB, like the ones kube-proxy watches.
	const slices = 20
	for i := 0; i < slices; i++ {
		if _, err := e.c.Admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, endpointSlice(i, 0), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	path := "/apis/discovery.k8s.io/v1/endpointslices"
	if _, err := get(h.ProxyURL+path, kubeProxyUA); err != nil {
		return err
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watchErr := make(chan error, 1)
	go func() {
		watchErr <- watchStream(wctx, h.ProxyURL+path+"?watch=true&allowWatchBookmarks=true", kubeProxyUA)
	}()
	time.Sleep(time.Second) // the list's files are written and synced
	obj, err := cloudSize(e, "/apis/discovery.k8s.io/v1/namespaces/"+ns+"/endpointslices/eps-0")
	if err != nil {
		return err
	}

	w0, _ := h.Metric("nodehub_cache_written_bytes_total")
	s0, _ := h.Metric("nodehub_cache_syncs_total")
	d0, _ := diskWriteBytes(h.Pid())
	events, start := 0, time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	for time.Since(start) < o.churn {
		<-tick.C
		i := events % slices
		if _, err := e.c.Admin.DiscoveryV1().EndpointSlices(ns).Update(ctx, endpointSlice(i, events+1), metav1.UpdateOptions{}); err != nil {
			return err
		}
		events++
	}
	tick.Stop()
	took := time.Since(start)
	time.Sleep(1500 * time.Millisecond) // the last batch and sync
	w1, _ := h.Metric("nodehub_cache_written_bytes_total")
	s1, _ := h.Metric("nodehub_cache_syncs_total")
	d1, _ := diskWriteBytes(h.Pid())
	stopWatch()
	<-watchErr

	fmt.Printf("\n## cache: %d EndpointSlice updates in %v (%.0f events/s), kube-proxy-like watch, protobuf\n", events, took.Round(time.Millisecond), float64(events)/took.Seconds())
	fmt.Printf("object_size\t%d B\n", obj)
	fmt.Printf("cache_bytes_written_per_event\t%.0f B\t(%.2fx the object)\n", (w1-w0)/float64(events), (w1-w0)/float64(events)/float64(obj))
	fmt.Printf("disk_write_bytes_per_event\t%.0f B\t(/proc/pid/io write_bytes)\n", float64(d1-d0)/float64(events))
	fmt.Printf("syncs_per_second\t%.2f\n", (s1-s0)/took.Seconds())

	// Memory with many objects cached.
	if err := makeConfigMaps(ctx, e.c, ns, o.objects); err != nil {
		return err
	}
	before, _ := rssKiB(h)
	if _, err := get(h.ProxyURL+"/api/v1/namespaces/"+ns+"/configmaps", "bench-agent/1"); err != nil {
		return err
	}
	files := settle(h)
	peak, _ := rssKiB(h)
	time.Sleep(5 * time.Second)
	after, err := rssKiB(h)
	if err != nil {
		return err
	}
	fmt.Printf("\n## cache memory: %d ConfigMaps listed through the hub and cached (%.0f files written in all)\n", o.objects, files)
	fmt.Printf("rss_before_list\t%.1f MiB\n", float64(before)/1024)
	if f := os.Getenv("BENCH_HEAP"); f != "" {
		resp, err := http.Get(h.HubURL + "/debug/pprof/heap")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			_ = os.WriteFile(f, b, 0o644)
		}
		_, m, _ := h.Get("/debug/pprof/heap?debug=1")
		if i := strings.Index(m, "# runtime.MemStats"); i >= 0 {
			fmt.Fprintln(os.Stderr, m[i:min(len(m), i+1500)])
		}
	}
	fmt.Printf("rss_just_after_caching\t%.1f MiB\n", float64(peak)/1024)
	fmt.Printf("rss_with_%d_cached_objects\t%.1f MiB\t(5 s later)\n", o.objects, float64(after)/1024)
	return nil
}

func endpointSlice(i, gen int) *discoveryv1.EndpointSlice {
	port, proto := int32(8080), corev1.ProtocolTCP
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: fmt.Sprintf("eps-%d", i), Labels: map[string]string{discoveryv1.LabelServiceName: fmt.Sprintf("svc-%d", i)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Port: &port, Protocol: &proto}},
	}
	for j := 0; j < 10; j++ {
		node, ready := harness.NodeName, true
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", i%250, (i/250)*10+j, gen%250+1)},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			NodeName:   &node,
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "benchcache", Name: fmt.Sprintf("pod-%d-%d-abcdefgh", i, j), UID: "0f3c1c2e-1111-2222-3333-444455556666"},
		})
	}
	return s
}

func makeConfigMaps(ctx context.Context, c *harness.Cluster, ns string, n int) error {
	return parallel(n, func(i int) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%05d", i), Labels: map[string]string{"app": "bench"}},
			Data: map[string]string{"key": fmt.Sprintf("value-%d", i)}}
		_, err := c.Admin.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
		return ignoreExists(err)
	})
}

// parallel runs create(0..n-1) on 8 workers and returns the first error.
func parallel(n int, create func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if err := create(i); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	return <-errc
}

func ignoreExists(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// get reads one response through the hub as the given client, in protobuf.
func get(url, ua string) (int, error) {
	b, err := getBody(url, ua)
	return len(b), err
}

// getBody GETs url in protobuf as the client ua and returns the answer's body (an error unless 200).
func getBody(url, ua string) ([]byte, error) {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", "application/vnd.kubernetes.protobuf")
	req.Header.Set("User-Agent", ua)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return b, err
}

// watchStream reads a watch through the hub until ctx ends.
func watchStream(ctx context.Context, url, ua string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Accept", "application/vnd.kubernetes.protobuf")
	req.Header.Set("User-Agent", ua)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

// cloudSize is the size of one object as the cloud sends it in protobuf.
func cloudSize(e *env, path string) (int, error) {
	b, err := e.c.Admin.CoreV1().RESTClient().Get().AbsPath(path).SetHeader("Accept", "application/vnd.kubernetes.protobuf").DoRaw(e.ctx)
	return len(b), err
}

// settle waits until the hub's cache writer has written everything (no file written for a second
// and nothing queued) and returns the number of files written.
func settle(h *harness.Hub) float64 {
	last := -1.0
	for i := 0; i < 120; i++ {
		time.Sleep(time.Second)
		files, _ := h.Metric("nodehub_cache_files_written_total")
		queued, _ := h.Metric("nodehub_cache_queued_bytes")
		if files == last && queued == 0 {
			return files
		}
		last = files
	}
	return last
}
