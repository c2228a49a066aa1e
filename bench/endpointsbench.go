package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"nodehub/e2e/harness"
)

// benchEndpoints measures the offline endpoint corrections (hub/endpointfix): the node's pods
// (o.pods, bench-NNN in default) each back several of o.services Services, whose slices (10
// endpoints: one of this node's pods, nine of other nodes') are written as the EndpointSlice
// controller would. With the link black-holed, kubelet's status write of one pod (a new IP,
// readiness flipping) goes through the hub; a kube-proxy-like JSON watch (node identity, from
// its list's resourceVersion: the shared store) waits for the MODIFIED events of every slice
// naming that pod. Then every pod at once: the hub's RSS with all of them corrected.
func benchEndpoints(e *env, o options) error {
	ctx := e.ctx
	ns := "epbench"
	if err := e.c.EnsureNamespace(ctx, ns); err != nil {
		return err
	}
	if err := e.c.BindNodes(ctx, "bench-endpoints", rbacv1.PolicyRule{APIGroups: []string{"", "discovery.k8s.io"},
		Resources: []string{"services", "endpointslices"}, Verbs: []string{"get", "list", "watch"}}); err != nil {
		return err
	}
	if err := makePods(ctx, e.c, o.pods); err != nil {
		return err
	}
	// One more pod of the node, in no Service: its status writes cost what a write costs without
	// any correction (the baseline).
	f := false
	solo := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("bench-%03d", o.pods)},
		Spec: corev1.PodSpec{NodeName: harness.NodeName, AutomountServiceAccountToken: &f, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/app:1"}}}}
	if _, err := e.c.Admin.CoreV1().Pods("default").Create(ctx, solo, metav1.CreateOptions{}); ignoreExists(err) != nil {
		return err
	}
	defer e.c.Admin.CoreV1().Pods("default").Delete(context.Background(), solo.Name, metav1.DeleteOptions{})
	uids := make([]types.UID, o.pods+1)
	for i := range uids {
		p, err := e.c.Admin.CoreV1().Pods("default").Get(ctx, fmt.Sprintf("bench-%03d", i), metav1.GetOptions{})
		if err != nil {
			return err
		}
		uids[i] = p.UID
	}
	if err := parallel(o.services, func(i int) error {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc-%04d", i)},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt(8080)}}}}
		if _, err := e.c.Admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); ignoreExists(err) != nil {
			return err
		}
		_, err := e.c.Admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, fixSlice(i, o.pods, uids), metav1.CreateOptions{})
		return ignoreExists(err)
	}); err != nil {
		return err
	}
	relay, dir, err := e.relay()
	if err != nil {
		return err
	}
	defer relay.Refuse()
	h, err := e.c.StartHub(ctx, harness.HubOptions{Bin: e.bin, Dir: dir, Servers: relay.URL(),
		Args: []string{"--v=2", "--heartbeat-interval-seconds=1", "--heartbeat-timeout-seconds=1"}})
	if err != nil {
		return err
	}
	defer h.Stop()
	if err := h.WaitHTTP(ctx, "/v1/readyz", 20*time.Second); err != nil {
		return err
	}
	if _, err := getBody(h.ProxyURL+"/api/v1/pods?fieldSelector=spec.nodeName%3D"+harness.NodeName, kubeletUA); err != nil {
		return err
	}
	path := "/apis/discovery.k8s.io/v1/namespaces/" + ns + "/endpointslices"
	rv, err := listRV(h.ProxyURL+path, kubeProxyUA)
	if err != nil {
		return err
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	seen := &sliceEvents{last: map[string]string{}, at: map[string]time.Time{}}
	if err := seen.watch(wctx, h.ProxyURL+path+"?watch=true&allowWatchBookmarks=true&resourceVersion="+rv); err != nil {
		return err
	}
	settle(h)
	if err := relay.BlackHole(); err != nil {
		return err
	}
	for i := 0; ; i++ {
		if v, _ := h.Metric(fmt.Sprintf(`nodehub_server_healthy{server="%s"}`, relay.Addr)); v == 0 {
			break
		}
		if i > 300 {
			return fmt.Errorf("hub never went offline")
		}
		time.Sleep(100 * time.Millisecond)
	}
	kubelet := h.Client(kubeletUA, true)
	// kubelet's status manager patches from the status the apiserver (here: the hub) has to its
	// own (statusutil.PatchPodStatus); the bench keeps what it last wrote.
	var smu sync.Mutex
	last := make([]corev1.PodStatus, o.pods+1)
	write := func(pod, gen int, ready bool) (string, error) {
		ip := fmt.Sprintf("10.%d.%d.%d", 60+gen/62500, (gen/250)%250, gen%250+1)
		st := map[bool]corev1.ConditionStatus{true: corev1.ConditionTrue, false: corev1.ConditionFalse}[ready]
		smu.Lock()
		old := last[pod]
		smu.Unlock()
		cur := corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}}
		oldJSON, _ := json.Marshal(corev1.Pod{Status: old})
		newJSON, _ := json.Marshal(corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uids[pod]}, Status: cur})
		patch, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, corev1.Pod{})
		if err != nil {
			return "", err
		}
		if _, err := kubelet.CoreV1().Pods("default").Patch(ctx, fmt.Sprintf("bench-%03d", pod), types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			return "", err
		}
		smu.Lock()
		last[pod] = cur
		smu.Unlock()
		return ip, nil
	}
	slicesOf := func(pod int) []string {
		var out []string
		for i := pod; i < o.services; i += o.pods {
			out = append(out, fmt.Sprintf("svc-%04d-x", i))
		}
		return out
	}
	rounds := 200
	// The baseline: the same writes of the pod in no Service.
	cpuB0, _ := cpuTime(h.Pid())
	for r := 0; r < rounds; r++ {
		if _, err := write(o.pods, 100000+r, r%2 == 0); err != nil {
			return err
		}
	}
	cpuB1, _ := cpuTime(h.Pid())
	baseline := (cpuB1 - cpuB0) / time.Duration(rounds)
	// One pod at a time.
	var first, all []time.Duration
	cpu0, _ := cpuTime(h.Pid())
	events0 := seen.count()
	for r := 0; r < rounds; r++ {
		pod := r % o.pods
		t0 := time.Now()
		ip, err := write(pod, r, r%2 == 0)
		if err != nil {
			return err
		}
		f, a, err := seen.waitFor(slicesOf(pod), ip, t0, 30*time.Second)
		if err != nil {
			return fmt.Errorf("round %d: %w", r, err)
		}
		first, all = append(first, f), append(all, a)
	}
	cpu1, _ := cpuTime(h.Pid())
	events := seen.count() - events0

	// Every pod at once (new IPs, ready): the hub's memory with all of them corrected.
	settle(h)
	rss0, _ := rssKiB(h)
	peak := sampleRSS(h)
	t0 := time.Now()
	var mu sync.Mutex
	ipOf := map[int]string{}
	if err := parallel(o.pods, func(p int) error {
		ip, err := write(p, 50000+p, true)
		mu.Lock()
		ipOf[p] = ip
		mu.Unlock()
		return err
	}); err != nil {
		return err
	}
	for p := 0; p < o.pods; p++ {
		if _, _, err := seen.waitFor(slicesOf(p), ipOf[p], t0, 60*time.Second); err != nil {
			return fmt.Errorf("all pods: %w", err)
		}
	}
	burst := time.Since(t0)
	peakKiB := peak()
	rss1, _ := rssKiB(h)
	corrected, _ := h.Metric("nodehub_endpoints_corrected")

	fmt.Printf("\n## offline endpoint corrections: %d pods on the node, %d Services (one 10-endpoint slice each, one endpoint of this node's pods), link black-holed\n", o.pods, o.services)
	fmt.Printf("kubelet status write -> MODIFIED at a kube-proxy-like JSON watch (shared store), %d writes, each pod in %d-%d slices\n", rounds, o.services/o.pods, (o.services+o.pods-1)/o.pods)
	fmt.Println("measure\tmedian\tp99")
	fmt.Printf("first slice\t%v\t%v\n", pct(first, 50), pct(first, 99))
	fmt.Printf("every slice of the pod\t%v\t%v\n", pct(all, 50), pct(all, 99))
	per := (cpu1 - cpu0) / time.Duration(rounds)
	fmt.Printf("hub CPU per status write (its PATCH, the correction, the MODIFIED events)\t%v\t(%d events; a write of a pod in no Service: %v; the correction's share %v per write, %v per MODIFIED event)\n",
		per, events, baseline, per-baseline, (per-baseline)*time.Duration(rounds)/time.Duration(max(events, 1)))
	fmt.Printf("every pod at once: all %d slices corrected at the watch after\t%v\n", o.services, burst.Round(time.Millisecond))
	fmt.Printf("RSS before\t%.1f MiB\tpeak %.1f MiB\tafter %.1f MiB\t(endpoints corrected: %v) %s\n", float64(rss0)/1024, float64(peakKiB)/1024, float64(rss1)/1024, corrected, rssSplit(h))
	return nil
}

// fixSlice is Service i's slice: this node's pod i%pods and nine endpoints of other nodes.
func fixSlice(i, pods int, uids []types.UID) *discoveryv1.EndpointSlice {
	port, proto := int32(8080), corev1.ProtocolTCP
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: fmt.Sprintf("svc-%04d-x", i), Labels: map[string]string{discoveryv1.LabelServiceName: fmt.Sprintf("svc-%04d", i)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Port: &port, Protocol: &proto}},
	}
	yes, no := true, false
	for j := 0; j < 10; j++ {
		node, name, uid := fmt.Sprintf("edge-other-%d", j), fmt.Sprintf("other-%04d-%d", i, j), types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i*10+j))
		addr := fmt.Sprintf("10.%d.%d.%d", 20+j, i/250, i%250+1)
		if j == 0 {
			p := i % pods
			node, name, uid, addr = harness.NodeName, fmt.Sprintf("bench-%03d", p), uids[p], fmt.Sprintf("10.50.0.%d", p+1)
		}
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{addr},
			Conditions: discoveryv1.EndpointConditions{Ready: &yes, Serving: &yes, Terminating: &no},
			NodeName:   &node,
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: name, UID: uid},
		})
	}
	return s
}

// sliceEvents follows one JSON watch of slices: for each slice, the address its first endpoint
// (this node's pod) last had and when it came.
type sliceEvents struct {
	mu   sync.Mutex
	last map[string]string
	at   map[string]time.Time
	n    int
}

func (s *sliceEvents) watch(ctx context.Context, url string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", kubeProxyUA)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return fmt.Errorf("watch: %s", resp.Status)
	}
	go func() {
		defer resp.Body.Close()
		dec := json.NewDecoder(bufio.NewReaderSize(resp.Body, 64<<10))
		for {
			var ev struct {
				Type   string                    `json:"type"`
				Object discoveryv1.EndpointSlice `json:"object"`
			}
			if err := dec.Decode(&ev); err != nil {
				return
			}
			now := time.Now()
			if ev.Type != "MODIFIED" && ev.Type != "ADDED" {
				continue
			}
			for _, e := range ev.Object.Endpoints {
				if e.NodeName != nil && *e.NodeName == harness.NodeName && len(e.Addresses) > 0 {
					s.mu.Lock()
					s.last[ev.Object.Name], s.at[ev.Object.Name] = e.Addresses[0], now
					s.n++
					s.mu.Unlock()
				}
			}
		}
	}()
	return nil
}

func (s *sliceEvents) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// waitFor waits until every named slice came with addr, and returns when the first and the last
// of them came, after t0.
func (s *sliceEvents) waitFor(names []string, addr string, t0 time.Time, d time.Duration) (time.Duration, time.Duration, error) {
	deadline := time.Now().Add(d)
	for {
		s.mu.Lock()
		var first, last time.Duration
		done := true
		for _, n := range names {
			if s.last[n] != addr {
				done = false
				break
			}
			at := s.at[n].Sub(t0)
			if first == 0 || at < first {
				first = at
			}
			last = max(last, at)
		}
		s.mu.Unlock()
		if done {
			return first, last, nil
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("slices %s not at %s within %v", strings.Join(names, ","), addr, d)
		}
		time.Sleep(time.Millisecond)
	}
}
