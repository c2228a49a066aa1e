package e2e

// Hostile clients: what a pod (or anything that reaches the hub's ports) can send, against the
// real apiserver. Throughout, a kubelet-like client must keep being served, the hub's memory must
// stay under a stated bound, and nothing cached for one credential may be read with another.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"nodehub/e2e/harness"
)

// hostileRSSBound is the most resident memory (VmHWM, the peak) the hub may reach through the
// hostile-clients workload at default flags.
const hostileRSSBound = 48 << 20

// memOf reads a process's resident set and its peak (bytes) from /proc/<pid>/status.
func memOf(t *testing.T, pid int) (rss, hwm int64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		kib, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kib << 10
		case "VmHWM:":
			hwm = kib << 10
		}
	}
	return rss, hwm
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// kubeletLoop plays kubelet: its node and its pods, every 100 ms, until stop; every failure is
// recorded with what the hub was being put through at the time.
type kubeletLoop struct {
	phase    atomic.Value
	calls    atomic.Int64
	mu       sync.Mutex
	failures []string
	done     chan struct{}
}

func startKubeletLoop(t *testing.T, h *harness.Hub) (*kubeletLoop, func()) {
	t.Helper()
	kl := &kubeletLoop{done: make(chan struct{})}
	kl.phase.Store("start")
	cfg := h.Config(kubeletUA, true)
	cfg.Timeout = 5 * time.Second
	kubelet := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(kl.done)
		for ctx.Err() == nil {
			_, err := kubelet.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{})
			if err == nil {
				_, err = kubelet.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + harness.NodeName})
			}
			kl.calls.Add(1)
			if err != nil && ctx.Err() == nil {
				kl.mu.Lock()
				kl.failures = append(kl.failures, fmt.Sprintf("%s: %v", kl.phase.Load(), err))
				kl.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return kl, func() { cancel(); <-kl.done }
}

// raw sends one request to base+path with the given headers and returns the code and body.
func raw(t *testing.T, cl *http.Client, method, url string, body io.Reader, hdr map[string]string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := cl.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b
}

// dirSize is the bytes of the files under dir.
func dirSize(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

func forgedJWT(sub string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256","kid":"x"}`)) + "." + enc([]byte(`{"sub":"`+sub+`"}`)) + "." + enc([]byte("nope"))
}

func TestHostileClients(t *testing.T) {
	ctx := context.Background()
	const ns = "hostile"
	relay, err := harness.NewRelay(strings.TrimPrefix(cluster.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Refuse()
	h := startHubServers(t, relay.URL(), "--heartbeat-timeout-seconds=1")
	tokens := saSetup(t, ns, "pod-a")
	tokens["pod-b"] = saSetup(t, ns+"-b", "pod-b")["pod-b"] // may read ConfigMaps of its own namespace only
	if _, err := cluster.Admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "only-for-a"}, Data: map[string]string{"k": "secret of a"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cl := &http.Client{Timeout: 20 * time.Second}
	defer cl.CloseIdleConnections()
	cm := h.ProxyURL + "/api/v1/namespaces/" + ns + "/configmaps"
	// What the node's identity may read (the node authorizer): its pods.
	pods := h.ProxyURL + "/api/v1/pods?fieldSelector=spec.nodeName%3D" + harness.NodeName

	// pod-a reads its ConfigMaps through the hub (loopback, its own token): they are cached as its
	// ServiceAccount's.
	podA := kubernetes.NewForConfigOrDie(&rest.Config{Host: h.ProxyURL, BearerToken: tokens["pod-a"], UserAgent: "coredns/1.0"})
	if _, err := podA.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := podA.CoreV1().ConfigMaps(ns).Get(ctx, "only-for-a", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	kl, stopKubelet := startKubeletLoop(t, h)
	defer stopKubelet()
	_, hwm0 := memOf(t, h.Pid())

	// 1. 100 GETs with 1 MB User-Agents: refused before any handler (431), the hub stays small.
	kl.phase.Store("1 MB User-Agents")
	for i := 0; i < 100; i++ {
		code, _ := raw(t, cl, http.MethodGet, pods, nil, map[string]string{"User-Agent": fmt.Sprintf("%03d", i) + strings.Repeat("x", 1<<20)})
		if code != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("GET with a 1 MB User-Agent: %d, want 431", code)
		}
	}
	// Long, odd and many User-Agents that fit the header limit: /metrics stays small.
	kl.phase.Store("long and odd User-Agents")
	for i := 0; i < 200; i++ {
		ua := fmt.Sprintf("%03d", i) + strings.Repeat("\xff{\"}\\é", 3000) + "/1.0"
		if code, b := raw(t, cl, http.MethodGet, h.ProxyURL+"/version", nil, map[string]string{"User-Agent": ua}); code >= 500 && code != http.StatusServiceUnavailable {
			t.Fatalf("odd User-Agent: %d %s", code, b)
		}
	}
	for i := 0; i < 20; i++ { // a long component names a cache owner no file name can hold
		ua := fmt.Sprintf("%03d", i) + strings.Repeat("c.", 10000) + "/1.0"
		if code, b := raw(t, cl, http.MethodGet, pods, nil, map[string]string{"User-Agent": ua}); code != http.StatusOK {
			t.Fatalf("a 20 KB component listing the node's pods: %d %s", code, b)
		}
	}
	for _, verb := range []string{"BREW", "PROPFIND", strings.Repeat("M", 100)} {
		raw(t, cl, verb, cm, nil, map[string]string{"User-Agent": "verbs/1"})
	}
	hdr := map[string]string{}
	for i := 0; i < 300; i++ {
		hdr[fmt.Sprintf("X-Many-%d", i)] = "v"
	}
	if code, _ := raw(t, cl, http.MethodGet, pods, nil, hdr); code != http.StatusOK {
		t.Fatalf("a GET with 300 small headers: %d", code)
	}
	// Many distinct owners: 300 components each list the node's pods with its identity.
	kl.phase.Store("many owners")
	for i := 0; i < 300; i++ {
		if code, b := raw(t, cl, http.MethodGet, pods+"&limit=5", nil, map[string]string{"User-Agent": fmt.Sprintf("owner-%d/1.0", i)}); code != http.StatusOK {
			t.Fatalf("owner %d: %d %s", i, code, b)
		}
	}
	_, metrics, err := h.Get("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("/metrics after 100 1 MB, 200 odd 18 KB User-Agents and 300 owners: %d bytes", len(metrics))
	if len(metrics) > 1<<20 {
		t.Fatalf("/metrics is %d bytes", len(metrics))
	}
	if !strings.Contains(metrics, `verb="other"`) {
		t.Error("an invented method is not counted as verb=\"other\"")
	}

	// 2. Giant selectors: 400 past 4 KiB, 431 past the header limit.
	kl.phase.Store("giant selectors")
	sel := "app+in+(" + strings.Repeat("a,", 2100) + "b)"
	if code, b := raw(t, cl, http.MethodGet, pods+"&labelSelector="+sel, nil, nil); code != http.StatusBadRequest || !bytes.Contains(b, []byte(`"kind":"Status"`)) {
		t.Fatalf("5 KB selector: %d %s, want a 400 Status", code, b)
	}
	if code, _ := raw(t, cl, http.MethodGet, pods+"&labelSelector="+strings.Repeat("a", 100<<10), nil, nil); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("100 KB selector: %d, want 431", code)
	}

	// 3. Upgrade headers on ordinary requests are answered as ordinary requests.
	kl.phase.Store("upgrade headers")
	for _, up := range []string{"x", "websocket", "SPDY/3.1", "h2c"} {
		if code, b := raw(t, cl, http.MethodGet, pods, nil, map[string]string{"Upgrade": up, "Connection": "Upgrade"}); code != http.StatusOK {
			t.Fatalf("GET with Upgrade: %s: %d %s", up, code, b)
		}
	}

	// 4. Impersonation and front-proxy headers never ride on the node's identity: the apiserver
	// sees the node (a node may not impersonate, so they would otherwise be refused).
	kl.phase.Store("identity headers")
	review := `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`
	code, b := raw(t, cl, http.MethodPost, h.ProxyURL+"/apis/authentication.k8s.io/v1/selfsubjectreviews", strings.NewReader(review),
		map[string]string{"Content-Type": "application/json", "Impersonate-User": "system:admin", "Impersonate-Group": "system:masters", "X-Remote-User": "admin", "X-Remote-Group": "system:masters"})
	var ssr authenticationv1.SelfSubjectReview
	if code != http.StatusCreated || json.Unmarshal(b, &ssr) != nil || ssr.Status.UserInfo.Username != "system:node:"+harness.NodeName {
		t.Fatalf("SelfSubjectReview with impersonation headers over the node's identity: %d %s", code, b)
	}

	// 5. Forged credentials online: the cloud refuses them, nothing is cached for them.
	kl.phase.Store("forged credentials online")
	forged := map[string]string{
		"sa: prefix":           "sa:system:serviceaccount:" + ns + ":pod-a",
		"bearer sa: prefix":    "Bearer sa:system:serviceaccount:" + ns + ":pod-a",
		"forged JWT of pod-a":  "Bearer " + forgedJWT("system:serviceaccount:"+ns+":pod-a"),
		"basic":                "Basic " + base64.StdEncoding.EncodeToString([]byte("pod-a:pw")),
		"pod-b's real token":   "Bearer " + tokens["pod-b"],
		"pod-a's token, mixed": "bEaReR  " + tokens["pod-a"] + "x",
		"empty bearer":         "Bearer ",
	}
	for name, auth := range forged {
		if code, b := raw(t, cl, http.MethodGet, cm+"/only-for-a", nil, map[string]string{"Authorization": auth, "User-Agent": "coredns/1.0"}); code == http.StatusOK {
			t.Fatalf("online, %s read pod-a's ConfigMap: %s", name, b)
		}
	}
	cacheWritten(t, h)

	// 6. Offline.
	kl.phase.Store("going offline")
	relay.Refuse()
	eventually(t, 20*time.Second, "hub offline", func() error {
		if v, _ := h.Metric(`nodehub_server_healthy{server="` + relay.Addr + `"}`); v != 0 {
			return errorf("server healthy %v", v)
		}
		return nil
	})
	kl.phase.Store("offline: forged credentials")
	if got, err := podA.CoreV1().ConfigMaps(ns).Get(ctx, "only-for-a", metav1.GetOptions{}); err != nil || got.Data["k"] != "secret of a" {
		t.Fatalf("offline, pod-a's own read: %v", err)
	}
	for name, auth := range forged {
		for _, path := range []string{cm + "/only-for-a", cm} {
			code, b := raw(t, cl, http.MethodGet, path, nil, map[string]string{"Authorization": auth, "User-Agent": "coredns/1.0"})
			if bytes.Contains(b, []byte("secret of a")) || bytes.Contains(b, []byte("only-for-a")) && code == http.StatusOK {
				t.Fatalf("offline, %s read pod-a's cache: %d %s", name, code, b)
			}
		}
	}

	// Offline creates with made-up credentials (issue 23: 30 tokens × 12 events of 1 MiB filled
	// the disk): none is kept, whatever the token; the cache's files do not grow.
	kl.phase.Store("offline: made-up credentials' creates")
	before := dirSize(t, h.CacheDir)
	oneMiB := strings.Repeat("f", 1<<20)
	for o := 0; o < 30; o++ {
		for i := 0; i < 12; i++ {
			ev := fmt.Sprintf(`{"apiVersion":"v1","kind":"Event","metadata":{"name":"forged-%d-%d","namespace":"default"},"involvedObject":{"kind":"Pod","name":"x","namespace":"default"},"reason":"Flood","message":"%d%s"}`, o, i, i, oneMiB)
			code, b := raw(t, cl, http.MethodPost, h.ProxyURL+"/api/v1/namespaces/default/events", strings.NewReader(ev),
				map[string]string{"Authorization": fmt.Sprintf("Bearer forged-%d", o), "User-Agent": fmt.Sprintf("owner-%d/1.0", o), "Content-Type": "application/json"})
			if code != http.StatusServiceUnavailable || !bytes.Contains(b, []byte(`"kind":"Status"`)) {
				t.Fatalf("offline create with a made-up token: %d %.300s, want a 503 Status", code, b)
			}
		}
	}
	if after := dirSize(t, h.CacheDir); after > before+1<<20 {
		t.Fatalf("360 offline creates of 1 MiB with 30 made-up tokens grew the cache from %s to %s", mib(before), mib(after))
	}

	// A flood of offline creates of 3 MiB events with a real token (pod-a's: the cloud accepted
	// it): the owner's quota keeps the newest, the rest is pushed out; then 8 concurrent offline
	// lists of them.
	kl.phase.Store("offline: creates flood")
	big := strings.Repeat("m", 3<<20-1024) // just under the 3 MiB a body may have
	flood := map[string]string{"Authorization": "Bearer " + tokens["pod-a"], "User-Agent": "flooder/1.0", "Content-Type": "application/json"}
	for i := 0; i < 20; i++ {
		ev := fmt.Sprintf(`{"apiVersion":"v1","kind":"Event","metadata":{"name":"flood-%d","namespace":"%s"},"involvedObject":{"kind":"Pod","name":"x","namespace":"%s"},"reason":"Flood","message":"%s"}`, i, ns, ns, big)
		if code, b := raw(t, cl, http.MethodPost, h.ProxyURL+"/api/v1/namespaces/"+ns+"/events", strings.NewReader(ev), flood); code != http.StatusCreated && i == 0 {
			t.Fatalf("offline create of a 3 MiB event: %d %.300s", code, b)
		}
	}
	if after := dirSize(t, h.CacheDir); after > before+64<<20 {
		t.Fatalf("the offline creates grew the cache from %s to %s", mib(before), mib(after))
	}
	rssC, hwmC := memOf(t, h.Pid())
	t.Logf("offline, after 20 creates of 3 MiB events and 360 refused ones: VmRSS %s, VmHWM %s", mib(rssC), mib(hwmC))
	kept := 0
	{
		req, _ := http.NewRequest(http.MethodGet, h.ProxyURL+"/api/v1/namespaces/"+ns+"/events", nil)
		for k, v := range flood {
			req.Header.Set(k, v)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if kept = bytes.Count(b, []byte(`"reason":"Flood"`)); resp.StatusCode != http.StatusOK || kept == 0 {
			t.Fatalf("offline list of the flood: %d, %d events", resp.StatusCode, kept)
		}
	}
	kl.phase.Store("offline: 8 concurrent lists of the flood")
	lister := &http.Client{}
	defer lister.CloseIdleConnections()
	var wg sync.WaitGroup
	var listed atomic.Int64
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			accept := "application/json"
			if i%2 == 1 {
				accept = "application/vnd.kubernetes.protobuf"
			}
			req, _ := http.NewRequest(http.MethodGet, h.ProxyURL+"/api/v1/namespaces/"+ns+"/events", nil)
			for k, v := range flood {
				req.Header.Set(k, v)
			}
			req.Header.Set("Accept", accept)
			resp, err := lister.Do(req)
			if err != nil {
				t.Errorf("offline list: %v", err)
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(resp.Body)
				t.Logf("offline list of the flood: %d %.300s", resp.StatusCode, b)
			}
			n, _ := io.Copy(io.Discard, resp.Body)
			listed.Add(n)
		}()
	}
	wg.Wait()
	t.Logf("8 concurrent offline lists of the flood: %s read", mib(listed.Load()))
	if listed.Load() < int64(8*kept*(3<<20-1024)) {
		t.Errorf("the offline lists sent %s, want the %d events kept 8 times", mib(listed.Load()), kept)
	}
	rssOff, hwmOff := memOf(t, h.Pid())
	t.Logf("offline, after the flood and the lists: VmRSS %s, VmHWM %s", mib(rssOff), mib(hwmOff))

	// Back online: the kubelet goes on being served.
	kl.phase.Store("back online")
	if err := relay.Pass(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "hub online", func() error {
		if v, _ := h.Metric(`nodehub_server_healthy{server="` + relay.Addr + `"}`); v != 1 {
			return errorf("server healthy %v", v)
		}
		return nil
	})
	time.Sleep(time.Second)
	stopKubelet()
	rss, hwm := memOf(t, h.Pid())
	t.Logf("hostile clients: kubelet-like client made %d rounds (node + pods); VmRSS %s at the end, VmHWM %s (%s before the hostile traffic); bound %s",
		kl.calls.Load(), mib(rss), mib(hwm), mib(hwm0), mib(hostileRSSBound))
	kl.mu.Lock()
	defer kl.mu.Unlock()
	if len(kl.failures) > 0 {
		t.Errorf("the kubelet-like client failed %d times, first: %s", len(kl.failures), kl.failures[0])
	}
	if hwm > hostileRSSBound {
		t.Errorf("VmHWM %s over the bound %s", mib(hwm), mib(hostileRSSBound))
	}
}

// Pods trickling request bodies, half of them with a made-up Upgrade header, cannot hold the
// in-flight budget: an Upgrade header is counted, a body not sent within 10 s gets 408 and frees
// its slot, and the node's own clients (their own budget) are served throughout.
func TestHostileSlowBodiesAndUpgradeHeaders(t *testing.T) {
	startControllerManager(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cluster.ApproveServingCSRs(ctx)
	const max = 8
	h := startHub(t, "--max-requests-in-flight="+strconv.Itoa(max))
	waitServing(t, h)
	const ns = "hostile-slow"
	tokens := saSetup(t, ns, "pod-a")
	pod := kubernetes.NewForConfigOrDie(podConfig(h, tokens["pod-a"]))
	if _, err := pod.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	kl, stopKubelet := startKubeletLoop(t, h)
	defer stopKubelet()
	kl.phase.Store("trickling bodies")

	pool := x509.NewCertPool()
	pool.AddCert(cluster.PKI.CA)
	codes := make(chan int, 2*max)
	start := time.Now()
	for i := 0; i < 2*max; i++ {
		go func() {
			c, err := tls.Dial("tcp", strings.TrimPrefix(h.SecureURL, "https://"), &tls.Config{RootCAs: pool})
			if err != nil {
				codes <- 0
				return
			}
			defer c.Close()
			up := ""
			if i%2 == 0 {
				up = "Upgrade: x\r\nConnection: Upgrade\r\n"
			}
			fmt.Fprintf(c, "POST /api/v1/namespaces/%s/configmaps HTTP/1.1\r\nHost: hub\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n%sContent-Length: 100000\r\n\r\n{", ns, tokens["pod-a"], up)
			go func() {
				for j := 0; j < 300; j++ { // one byte every 100 ms: 30 s, never the whole body
					time.Sleep(100 * time.Millisecond)
					if _, err := c.Write([]byte(" ")); err != nil {
						return
					}
				}
			}()
			_ = c.SetReadDeadline(time.Now().Add(25 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	got := map[int]int{}
	for i := 0; i < 2*max; i++ {
		got[<-codes]++
	}
	took := time.Since(start)
	t.Logf("%d trickling POSTs (half with Upgrade: x) with --max-requests-in-flight=%d: answers %v within %v", 2*max, max, got, took.Round(time.Millisecond))
	if got[http.StatusTooManyRequests] < max || got[http.StatusRequestTimeout] == 0 || got[http.StatusTooManyRequests]+got[http.StatusRequestTimeout] != 2*max {
		t.Errorf("answers %v: want %d × 429 (the budget was full, Upgrade headers counted) and the rest 408", got, max)
	}
	if took > 20*time.Second {
		t.Errorf("trickling bodies held their slots for %v", took)
	}
	// The slots are free again: the pod is served.
	kl.phase.Store("after the trickle")
	if _, err := pod.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("a pod after the trickling bodies: %v", err)
	}
	stopKubelet()
	kl.mu.Lock()
	defer kl.mu.Unlock()
	t.Logf("kubelet-like client: %d rounds, %d failures", kl.calls.Load(), len(kl.failures))
	if len(kl.failures) > 0 {
		t.Errorf("the kubelet-like client failed %d times while pods held their budget, first: %s", len(kl.failures), kl.failures[0])
	}
}
