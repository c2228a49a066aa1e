package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"nodehub/e2e/harness"
)

// kubeletCut is how long the link stays black-holed in the "cut for minutes" scenario before the
// kubelet and then the whole node are restarted offline. NODEHUB_E2E_KUBELET_CUT (a Go duration)
// overrides it for a quicker local run.
const kubeletCut = 2 * time.Minute

const (
	hollowNode  = "hollow-1"
	kubeletNS   = "kubelet-e2e"
	kubeletPods = 5
)

// allowedError is a kubelet error line (klog "E…") a scenario expects, and why.
type allowedError struct{ re, why string }

// kubemarkErrors are what kubemark's fake runtime and fake cadvisor log all the time, online as
// offline; they say nothing about the cloud.
var kubemarkErrors = []allowedError{
	{`"Eviction manager: failed to (get HasDedicatedImageFs|synchronize)".*imagefs device is not found`, "the fake cadvisor has no image filesystem"},
	{`"Failed to stat container log" err="unimplemented testing mock"`, "the fake runtime keeps no container logs"},
	{`"Failed to start healthz server" err="listen tcp 127.0.0.1:10248: bind: address already in use"`,
		"another kubelet on this machine holds the healthz port (kubemark has no flag for it; the tests use the read-only port)"},
	{`"failed to read memory cgroup (config|limits) for the pod" err="not implemented"`, "v1.37's kubelet asks the runtime for pod cgroups, which the fake runtime does not implement"},
}

// kubeletStartErrors are what every kubelet start logs in its first second, online too (the
// online scenario logs the start's error lines to show it).
var kubeletStartErrors = []allowedError{
	{`"Image garbage collection failed once. Stats initialization may not have completed yet" err="imageFs information is unavailable"`, "cadvisor's first stats are not there yet"},
	{`"Skipping pod synchronization" err="\[container runtime status check may not have completed yet, PLEG is not healthy: pleg has yet to be successful\]"`, "the first runtime relist has not run yet"},
	{`"Skipping pod synchronization" err="PLEG is not healthy: pleg has yet to be successful"`, "the same, once the runtime status check completed first (a loaded machine)"},
	{`"Error getting the current node from lister" err="node \\"` + hollowNode + `\\" not found"`, "the node informer has not synced yet"},
	{`"Unable to register mirror pod because node is not registered yet" err="node \\"` + hollowNode + `\\" not found"`, "v1.37's kubelet: the node informer has not synced yet (online too)"},
}

// A cut must give the kubelet no error of its own: nodehub answers everything it asks offline
// (its lease, node status and pod status writes, its lists and watches, its token requests).
// Whatever it logs beyond kubemark's own noise (and, after a restart, a start's) fails a scenario.

// TestKubelet runs kubemark's hollow node (the kubelet's and kube-proxy's own code, a fake
// container runtime) through nodehub, the cloud reachable only through a relay that a scenario
// black-holes. The scenarios share one node and run in order: online, cut for minutes, kubelet
// restarted offline, node rebooted offline, cloud returns, kubelet restarted as the link is cut
// again (kubeletearly_test.go). They run once per Kubernetes release
// of the harness (TestKubelet/v1.34/..., TestKubelet/v1.37/...), one release after the other, each
// with its own control plane, kubelet and kube-proxy of that release; NODEHUB_E2E_KUBELET_RELEASES
// ("v1.37", or "v1.34,v1.37") picks some.
func TestKubelet(t *testing.T) {
	cut := kubeletCut
	if v := os.Getenv("NODEHUB_E2E_KUBELET_CUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("NODEHUB_E2E_KUBELET_CUT: %v", err)
		}
		cut = d
	}
	releases := harness.Releases()
	if v := os.Getenv("NODEHUB_E2E_KUBELET_RELEASES"); v != "" {
		releases = nil
		for _, name := range strings.Split(v, ",") {
			r, err := harness.ReleaseNamed(strings.TrimSpace(name))
			if err != nil {
				t.Fatalf("NODEHUB_E2E_KUBELET_RELEASES: %v", err)
			}
			releases = append(releases, r)
		}
	}
	for _, r := range releases {
		t.Run(r.Name, func(t *testing.T) { kubeletScenarios(t, clusterAt(t, r), cut) })
	}
}

// kubeletScenarios runs TestKubelet's scenarios on cluster c, in front of which nodehub runs.
func kubeletScenarios(t *testing.T, c *harness.Cluster, cut time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	kcm, err := c.StartControllerManager(ctx, harness.ControllerOptions{Controllers: harness.KubeletControllers})
	if err != nil {
		t.Fatal(err)
	}
	defer kcm.Stop()
	// kube-proxy runs as the node (nodehub lends it the node's identity): grant the node what a
	// real cluster grants kube-proxy.
	if err := c.BindNodeProxier(ctx, hollowNode); err != nil {
		t.Fatal(err)
	}
	cert, key, err := c.NodeCredentials(hollowNode)
	if err != nil {
		t.Fatal(err)
	}
	relay, err := harness.NewRelay(strings.TrimPrefix(c.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	hub := startHubOn(t, c, t.TempDir(), relay.URL(), "--node-name="+hollowNode, "--client-cert="+cert, "--client-key="+key)

	admin := c.Admin
	if err := c.EnsureNamespace(ctx, kubeletNS); err != nil {
		t.Fatal(err)
	}
	if err := harness.CreateWorkloadSources(ctx, admin, kubeletNS); err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := 0; i < kubeletPods; i++ {
		names = append(names, fmt.Sprintf("app-%d", i))
	}
	names = append(names, "doomed") // deleted in the cloud during the outage
	for _, n := range names {
		if _, err := admin.CoreV1().Pods(kubeletNS).Create(ctx, harness.WorkloadPod(kubeletNS, n, hollowNode), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A Service and its EndpointSlice for the hollow kube-proxy to watch.
	if _, err := admin.CoreV1().Services(kubeletNS).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "edge-workload"}, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	port, proto := int32(80), corev1.ProtocolTCP
	if _, err := admin.DiscoveryV1().EndpointSlices(kubeletNS).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "app-1", Labels: map[string]string{discoveryv1.LabelServiceName: "app"}},
		AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.10"}}},
		Ports: []discoveryv1.EndpointPort{{Port: &port, Protocol: &proto}}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	nodeDir := t.TempDir()
	if d := os.Getenv("NODEHUB_E2E_KUBELET_LOGS"); d != "" {
		nodeDir = d // kubemark's logs, kept after the test
	}
	node, err := c.StartHollowNode(ctx, harness.HollowOptions{Name: hollowNode, Dir: nodeDir, Server: hub.ProxyURL, Proxy: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		node.Stop()
		if t.Failed() {
			t.Logf("kubemark kubelet log (tail, without the fake runtime's noise):\n%s", tailString(withoutNoise(node.Kubelet.Log()), 10000))
			t.Logf("kubemark proxy log (tail):\n%s", tailString(node.Proxy.Log(), 3000))
		}
		// No namespace controller runs: the pods go now, the namespace stays Terminating.
		ctx := context.Background()
		zero := int64(0)
		_ = admin.CoreV1().Pods(kubeletNS).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		_ = admin.CoreV1().Nodes().Delete(ctx, hollowNode, metav1.DeleteOptions{})
		_ = admin.CoreV1().Namespaces().Delete(ctx, kubeletNS, metav1.DeleteOptions{})
	}()

	k := &kubeletScenario{c: c, node: node, hub: hub, relay: relay, names: names,
		view: hub.Client(c.UserAgent("kubelet"), true)} // what the node sees: nodehub, answering as to its kubelet

	if !t.Run("online", k.online) {
		return
	}
	t.Run("cut", func(t *testing.T) { k.cut(t, cut) })
	t.Run("kubelet-restart-offline", k.kubeletRestart)
	t.Run("node-reboot-offline", k.nodeReboot)
	t.Run("cloud-returns", k.cloudReturns)
	t.Run("kubelet-restart-early-in-outage", k.kubeletRestartEarly)
}

type kubeletScenario struct {
	c     *harness.Cluster // the cloud
	node  *harness.HollowNode
	hub   *harness.Hub
	relay *harness.Relay
	view  *kubernetes.Clientset
	names []string // the pods on the node when the link is cut
	// before is the node's view of its pods at the end of the last scenario that had them all
	// running; nil when the last one did not.
	before map[string]podState
}

// podState is what says a pod was not restarted or recreated.
type podState struct {
	uid         string
	restarts    int32
	containerID string
	started     time.Time
}

func statesOf(list []corev1.Pod) map[string]podState {
	m := map[string]podState{}
	for _, p := range list {
		s := podState{uid: string(p.UID)}
		for _, cs := range p.Status.ContainerStatuses {
			s.restarts += cs.RestartCount
			s.containerID = cs.ContainerID
			if cs.State.Running != nil {
				s.started = cs.State.Running.StartedAt.Time
			}
		}
		m[p.Name] = s
	}
	return m
}

func (k *kubeletScenario) viewPods(ctx context.Context) ([]corev1.Pod, error) {
	l, err := k.view.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + hollowNode})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

func (k *kubeletScenario) cloudPods(ctx context.Context) ([]corev1.Pod, error) {
	l, err := k.c.Admin.CoreV1().Pods(kubeletNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// waitRunning waits until the kubelet's runtime runs exactly pods pods with one running container each.
func (k *kubeletScenario) waitRunning(t *testing.T, pods int, d time.Duration) {
	t.Helper()
	eventually(t, d, fmt.Sprintf("the kubelet's runtime runs %d pods", pods), func() error {
		p, c, err := k.node.Running(context.Background())
		if err != nil {
			return err
		}
		if p != pods || c != pods {
			return errorf("runtime runs %d pods, %d containers", p, c)
		}
		return nil
	})
}

func (k *kubeletScenario) online(t *testing.T) {
	ctx := context.Background()
	eventually(t, 90*time.Second, "node registered through nodehub and Ready", func() error {
		n, err := k.c.Admin.CoreV1().Nodes().Get(ctx, hollowNode, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return harness.NodeReady(n)
	})
	eventually(t, 90*time.Second, "pods Running in the cloud", func() error {
		l, err := k.cloudPods(ctx)
		if err != nil {
			return err
		}
		return harness.PodsStarted(l, k.names, time.Time{})
	})
	l, err := k.cloudPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range l {
		if !harness.HasTokenVolume(&p) {
			t.Fatalf("pod %s has no projected ServiceAccount token volume: %+v", p.Name, p.Spec.Volumes)
		}
	}
	k.waitRunning(t, len(k.names), 30*time.Second)
	for _, line := range unexpectedErrors(k.node.Kubelet.Log(), 0, kubemarkErrors) {
		t.Logf("kubelet start, online: %s", line)
	}
	// Requests reached nodehub as the real components', not as "hollow-kubelet".
	_, metrics, err := k.hub.Get("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{`component="kubelet"`, `component="kube-proxy"`} {
		if !strings.Contains(metrics, c) {
			t.Errorf("nodehub saw no request with %s", c)
		}
	}
	if strings.Contains(metrics, "hollow") {
		t.Errorf("nodehub saw kubemark's own User-Agent")
	}
	eventually(t, 30*time.Second, "kube-proxy's informers synced through nodehub", func() error {
		return proxySynced(k.node.Proxy.Log())
	})
	eventually(t, 30*time.Second, "the node's view through nodehub shows every pod running", func() error {
		l, err := k.viewPods(ctx)
		if err != nil {
			return err
		}
		if err := harness.PodsStarted(l, k.names, time.Time{}); err != nil {
			return err
		}
		k.before = statesOf(l)
		return nil
	})
	l, err = k.viewPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range l {
		if err := checkVolumes(k.node, &l[i]); err != nil {
			t.Error(err)
		}
	}
}

func (k *kubeletScenario) cut(t *testing.T, d time.Duration) {
	ctx := context.Background()
	offset, proxyOffset := len(k.node.Kubelet.Log()), len(k.node.Proxy.Log())
	before, err := requestCounts(k.hub)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.relay.BlackHole(); err != nil {
		t.Fatal(err)
	}
	t.Logf("link black-holed for %v", d)
	// The cloud changes while the node cannot see it: one pod deleted, one created.
	if err := k.c.Admin.CoreV1().Pods(kubeletNS).Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.c.Admin.CoreV1().Pods(kubeletNS).Create(ctx, harness.WorkloadPod(kubeletNS, "newcomer", hollowNode), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var lastRenew time.Time
	renewals := 0
	for time.Since(start) < d {
		time.Sleep(10 * time.Second)
		if !k.node.Kubelet.Running() || !k.node.Proxy.Running() {
			t.Fatalf("a hollow node process exited during the cut")
		}
		lease, err := k.view.CoordinationV1().Leases("kube-node-lease").Get(ctx, hollowNode, metav1.GetOptions{})
		if err != nil {
			t.Errorf("lease through nodehub: %v", err)
			continue
		}
		if lease.Spec.RenewTime != nil && lease.Spec.RenewTime.After(lastRenew) {
			lastRenew = lease.Spec.RenewTime.Time
			renewals++
		}
	}
	// The kubelet renews its lease every 10 s (a quarter of 40 s): it kept doing so, to nodehub.
	if want := int(d/(20*time.Second)) - 1; renewals < want || time.Since(lastRenew) > 25*time.Second {
		t.Errorf("lease renewals seen through nodehub during %v: %d, last at %v (want >= %d, the last within 25 s)", d, renewals, lastRenew, want)
	}
	n, err := k.view.CoreV1().Nodes().Get(ctx, hollowNode, metav1.GetOptions{})
	if err != nil {
		t.Errorf("node through nodehub: %v", err)
	} else if err := harness.NodeReady(n); err != nil {
		t.Errorf("through nodehub: %v", err)
	}
	// The kubelet's lease renewals (every 10 s) were answered by nodehub. Its node status loop
	// runs every 10 s on the Node its informer holds (nodehub's watch) and patches the status
	// when it changed or every 5 minutes (kubemark's report frequency), so a cut of a few
	// minutes may see no patch; an error of that loop would fail the error check below.
	after, err := requestCounts(k.hub)
	if err != nil {
		t.Fatal(err)
	}
	leases := `verb="update",resource="leases",component="kubelet",code="200"`
	if got, want := int(after[leases]-before[leases]), int(d/(10*time.Second))-2; got < want {
		t.Errorf("nodehub answered %d kubelet lease renewals during the %v cut, want >= %d", got, d, want)
	}
	status := `verb="patch",resource="nodes/status",component="kubelet",code="200"`
	t.Logf("during the cut nodehub answered %v lease renewals and %v node status patches of the kubelet", after[leases]-before[leases], after[status]-before[status])
	// Whatever else the node's components asked, nodehub answered it.
	for c, v := range after {
		if v > before[c] && !strings.HasSuffix(c, `code="200"`) && !strings.HasSuffix(c, `code="201"`) {
			t.Errorf("during the cut: %v x nodehub_requests_total{%s}", v-before[c], c)
		}
	}
	// No pod restarted, killed or recreated.
	p, c, err := k.node.Running(ctx)
	if err != nil || p != len(k.names) || c != len(k.names) {
		t.Errorf("after the cut the runtime runs %d pods, %d containers (%v); want %d", p, c, err, len(k.names))
	}
	l, err := k.viewPods(ctx)
	if err != nil {
		t.Fatalf("pods through nodehub offline: %v", err)
	}
	now := statesOf(l)
	for name, b := range k.before {
		if now[name] != b {
			t.Errorf("pod %s changed during the cut: %+v, was %+v", name, now[name], b)
		}
	}
	t.Run("no-unexpected-kubelet-errors", func(t *testing.T) { checkKubeletErrors(t, k.node.Kubelet.Log(), offset, kubemarkErrors) })
	t.Run("no-kube-proxy-errors", func(t *testing.T) {
		if lines := harness.ErrorLines(k.node.Proxy.Log(), proxyOffset); len(lines) > 0 {
			t.Errorf("kube-proxy logged %d errors during the outage, first ones:\n%s", len(lines), strings.Join(lines[:min(len(lines), 10)], "\n"))
		}
	})
}

// requestCounts returns nodehub's nodehub_requests_total series by their labels.
func requestCounts(h *harness.Hub) (map[string]float64, error) {
	_, body, err := h.Get("/metrics")
	if err != nil {
		return nil, err
	}
	m := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, "nodehub_requests_total{")
		if !ok {
			continue
		}
		labels, v, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		m[labels] = f
	}
	return m, nil
}

// proxySynced says whether kube-proxy's log shows its service and EndpointSlice informers synced.
func proxySynced(log string) error {
	for _, want := range []string{`"Caches are synced" controller="service config"`, `"Caches are synced" controller="endpoint slice config"`} {
		if !strings.Contains(log, want) {
			return errorf("kube-proxy log lacks %q", want)
		}
	}
	return nil
}

// withoutNoise drops the log lines of the fake runtime's allowed errors (the first entries of
// kubemarkErrors), so a failure shows what the kubelet did.
func withoutNoise(log string) string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		noise := false
		for _, a := range kubemarkErrors {
			if regexp.MustCompile(a.re).MatchString(line) {
				noise = true
				break
			}
		}
		if !noise {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// unexpectedErrors returns the kubelet's error lines from offset on that allowed does not explain.
func unexpectedErrors(log string, offset int, allowed ...[]allowedError) []string {
	var unexpected []string
	for _, line := range harness.ErrorLines(log, offset) {
		ok := false
		for _, a := range slices.Concat(allowed...) {
			if regexp.MustCompile(a.re).MatchString(line) {
				ok = true
				break
			}
		}
		if !ok {
			unexpected = append(unexpected, line)
		}
	}
	return unexpected
}

func checkKubeletErrors(t *testing.T, log string, offset int, allowed ...[]allowedError) {
	t.Helper()
	if unexpected := unexpectedErrors(log, offset, allowed...); len(unexpected) > 0 {
		t.Errorf("%d unexpected kubelet errors during the outage, first ones:\n%s", len(unexpected), strings.Join(unexpected[:min(len(unexpected), 15)], "\n"))
	}
}

// offlineStart restarts the kubelet (restart) while the link is black-holed and waits for every
// pod the node knows to run again: the runtime runs them all, and the status the kubelet reported
// to nodehub shows each container started after the restart.
func (k *kubeletScenario) offlineStart(t *testing.T, what string, restart func() error) {
	ctx := context.Background()
	offset := len(k.node.Kubelet.Log())
	at := time.Now()
	k.before = nil
	if err := restart(); err != nil {
		t.Fatal(err)
	}
	k.waitRunning(t, len(k.names), 2*time.Minute)
	started := time.Since(at)
	eventually(t, 60*time.Second, "the kubelet reported every container started to nodehub", func() error {
		l, err := k.viewPods(ctx)
		if err != nil {
			return err
		}
		if err := harness.PodsStarted(l, k.names, at); err != nil {
			return err
		}
		k.before = statesOf(l)
		return nil
	})
	t.Logf("%s offline: all %d pods' containers started %v after the restart", what, len(k.names), started.Round(100*time.Millisecond))
	l, err := k.viewPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range l {
		if err := checkVolumes(k.node, &l[i]); err != nil {
			t.Error(err)
		}
	}
	n, err := k.view.CoreV1().Nodes().Get(ctx, hollowNode, metav1.GetOptions{})
	if err != nil {
		t.Errorf("node through nodehub: %v", err)
	} else if err := harness.NodeReady(n); err != nil {
		t.Errorf("through nodehub: %v", err)
	}
	t.Run("no-unexpected-kubelet-errors", func(t *testing.T) {
		checkKubeletErrors(t, k.node.Kubelet.Log(), offset, kubemarkErrors, kubeletStartErrors)
	})
}

// checkVolumes reads what the kubelet wrote into p's volumes: the ServiceAccount token (a token
// the cloud issued for this very pod, not expired), the CA and namespace beside it, the ConfigMap
// and the Secret.
func checkVolumes(n *harness.HollowNode, p *corev1.Pod) error {
	uid := string(p.UID)
	var tokenVol string
	for _, v := range p.Spec.Volumes {
		if v.Projected != nil && strings.HasPrefix(v.Name, "kube-api-access-") {
			tokenVol = v.Name
		}
	}
	read := func(plugin, vol, file string) (string, error) {
		b, err := n.VolumeFile(uid, plugin, vol, file)
		if err != nil {
			return "", fmt.Errorf("pod %s: %s volume %s: %w", p.Name, plugin, vol, err)
		}
		return string(b), nil
	}
	for _, f := range []struct{ plugin, vol, file, want string }{
		{"configmap", "config", "greeting", "hello from the cloud"},
		{"secret", "secret", "password", "s3cret"},
		{"projected", tokenVol, "namespace", p.Namespace},
		{"projected", tokenVol, "ca.crt", "-----BEGIN CERTIFICATE-----"},
	} {
		got, err := read(f.plugin, f.vol, f.file)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(got, f.want) {
			return fmt.Errorf("pod %s: %s/%s is %.40q, want %q", p.Name, f.vol, f.file, got, f.want)
		}
	}
	tok, err := read("projected", tokenVol, "token")
	if err != nil {
		return err
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return fmt.Errorf("pod %s: the token is not a JWT: %.40q", p.Name, tok)
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return fmt.Errorf("pod %s: token payload: %w", p.Name, err)
	}
	var claims struct {
		Exp int64  `json:"exp"`
		Sub string `json:"sub"`
		K8s struct {
			Pod struct{ Name, UID string } `json:"pod"`
		} `json:"kubernetes.io"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return fmt.Errorf("pod %s: token claims: %w", p.Name, err)
	}
	if claims.K8s.Pod.UID != uid || claims.Sub != "system:serviceaccount:"+p.Namespace+":default" || time.Unix(claims.Exp, 0).Before(time.Now()) {
		return fmt.Errorf("pod %s: the token is not the cloud's for this pod: %s", p.Name, payload)
	}
	return nil
}

func (k *kubeletScenario) kubeletRestart(t *testing.T) {
	k.offlineStart(t, "kubelet restart", func() error { return k.node.RestartKubelet(context.Background()) })
}

func (k *kubeletScenario) nodeReboot(t *testing.T) {
	proxyLog := len(k.node.Proxy.Log())
	defer func() {
		// kube-proxy restarted offline lists services and EndpointSlices from nodehub at once.
		eventually(t, 30*time.Second, "kube-proxy's informers synced through nodehub after the reboot offline", func() error {
			return proxySynced(k.node.Proxy.Log()[proxyLog:])
		})
	}()
	k.offlineStart(t, "node reboot", func() error {
		ctx := context.Background()
		k.node.Proxy.Stop()
		k.node.StopKubelet()
		k.hub.Stop()
		if err := k.hub.Start(); err != nil {
			return err
		}
		if err := k.hub.WaitHTTP(ctx, "/v1/healthz", 20*time.Second); err != nil {
			return err
		}
		if err := k.node.Proxy.Start(); err != nil {
			return err
		}
		if err := k.node.Kubelet.Start(); err != nil {
			return err
		}
		return k.node.WaitKubelet(ctx, 60*time.Second)
	})
}

func (k *kubeletScenario) cloudReturns(t *testing.T) {
	ctx := context.Background()
	if err := k.relay.Pass(); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	want := []string{"newcomer"}
	for _, n := range k.names {
		if n != "doomed" {
			want = append(want, n)
		}
	}
	eventually(t, 90*time.Second, "the pod deleted in the cloud during the outage is stopped and gone", func() error {
		if _, err := k.c.Admin.CoreV1().Pods(kubeletNS).Get(ctx, "doomed", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return errorf("pod doomed still in the cloud (%v)", err)
		}
		return nil
	})
	eventually(t, 90*time.Second, "the pod created during the outage runs, the others run on", func() error {
		l, err := k.cloudPods(ctx)
		if err != nil {
			return err
		}
		if len(l) != len(want) {
			return errorf("%d pods in the cloud, want %d", len(l), len(want))
		}
		return harness.PodsStarted(l, want, time.Time{})
	})
	k.waitRunning(t, len(want), 30*time.Second)
	eventually(t, 60*time.Second, "the node is Ready in the cloud and its lease renewed", func() error {
		n, err := k.c.Admin.CoreV1().Nodes().Get(ctx, hollowNode, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := harness.NodeReady(n); err != nil {
			return err
		}
		lease, err := k.c.Admin.CoordinationV1().Leases("kube-node-lease").Get(ctx, hollowNode, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if lease.Spec.RenewTime == nil || lease.Spec.RenewTime.Time.Before(at.Truncate(time.Second)) {
			return errorf("lease last renewed at %v, before the return", lease.Spec.RenewTime)
		}
		return nil
	})
	// No restart caused by the outage or the return: the cloud now has what the node reported
	// offline (the same containers, started when the node last started them).
	if k.before == nil {
		t.Fatalf("the node did not run all its pods before the return: no restart on return cannot be checked")
	}
	eventually(t, 60*time.Second, "the cloud has the node's pod statuses, with no restart on return", func() error {
		l, err := k.cloudPods(ctx)
		if err != nil {
			return err
		}
		now := statesOf(l)
		for name, b := range k.before {
			if name == "doomed" {
				continue
			}
			if now[name] != b {
				return errorf("pod %s in the cloud: %+v, the node reported %+v offline", name, now[name], b)
			}
		}
		return nil
	})
}
