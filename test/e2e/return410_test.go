package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"nodehub/e2e/harness"
)

// reflector is a kube-proxy-like client as client-go's reflector is: it lists, then watches from
// the list's resourceVersion with bookmarks, resumes a watch that ended from the last
// resourceVersion it saw, and lists again only when a watch ends in 410 (which it counts).
type reflector struct {
	name, path, ua string

	mu      sync.Mutex
	items   map[string]string // name → resourceVersion
	rv      string
	lists   int
	expired []string // how each watch that ended in 410 ended
}

func (r *reflector) run(ctx context.Context, base string) {
	for ctx.Err() == nil {
		r.mu.Lock()
		rv := r.rv
		r.mu.Unlock()
		var err error
		if rv == "" {
			err = r.list(ctx, base)
		} else {
			err = r.watch(ctx, base, rv)
		}
		if err != nil && ctx.Err() == nil {
			select { // client-go's back-off after a failed request
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func (r *reflector) get(ctx context.Context, u string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", r.ua)
	req.Header.Set("Accept", "application/json")
	return http.DefaultClient.Do(req)
}

func (r *reflector) list(ctx context.Context, base string) error {
	resp, err := r.get(ctx, base+r.path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("list: %s", resp.Status)
	}
	var l struct {
		Metadata struct{ ResourceVersion string }
		Items    []struct {
			Metadata struct{ Name, ResourceVersion string }
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.items = map[string]string{}
	for _, it := range l.Items {
		r.items[it.Metadata.Name] = it.Metadata.ResourceVersion
	}
	r.rv, r.lists = l.Metadata.ResourceVersion, r.lists+1
	return nil
}

// watch watches from rv until the watch ends; a 410 (answered, or an ERROR event) makes the next
// round a list.
func (r *reflector) watch(ctx context.Context, base, rv string) error {
	sep := "?"
	if strings.Contains(r.path, "?") {
		sep = "&"
	}
	resp, err := r.get(ctx, base+r.path+sep+"watch=1&allowWatchBookmarks=true&timeoutSeconds=600&resourceVersion="+rv)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusGone {
		r.gone("answered " + resp.Status)
		return nil
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("watch: %s", resp.Status)
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var ev struct {
			Type   string
			Object struct {
				Metadata        struct{ Name, ResourceVersion string }
				Code            int
				Reason, Message string
			}
		}
		if err := dec.Decode(&ev); err != nil {
			return nil // the watch ended: resume from the last resourceVersion
		}
		o := ev.Object
		r.mu.Lock()
		switch ev.Type {
		case "ADDED", "MODIFIED":
			r.items[o.Metadata.Name], r.rv = o.Metadata.ResourceVersion, o.Metadata.ResourceVersion
		case "DELETED":
			delete(r.items, o.Metadata.Name)
			r.rv = o.Metadata.ResourceVersion
		case "BOOKMARK":
			r.rv = o.Metadata.ResourceVersion
		}
		r.mu.Unlock()
		if ev.Type == "ERROR" {
			if o.Code == http.StatusGone || o.Reason == "Expired" || o.Reason == "Gone" {
				r.gone(fmt.Sprintf("ERROR %d %s: %s", o.Code, o.Reason, o.Message))
				return nil
			}
			return fmt.Errorf("watch: ERROR %d %s", o.Code, o.Message)
		}
	}
}

func (r *reflector) gone(how string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expired = append(r.expired, how)
	r.rv = ""
}

// state is what the client holds: "name@rv" sorted.
func (r *reflector) state() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return flatten(r.items)
}

// bigSlices makes n Services with one EndpointSlice of 1000 endpoints each (about 60 KB in
// protobuf): a few changes fill the shared store's event window (2 MiB).
func bigSlices(t *testing.T, ctx context.Context, c *harness.Cluster, ns string, n int) []string {
	t.Helper()
	port, proto := int32(8080), corev1.ProtocolTCP
	var names []string
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("big%02d", i)
		if _, err := c.Admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eps := make([]discoveryv1.Endpoint, 1000)
		for j := range eps {
			eps[j] = discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.%d.%d.%d", i, j/250, j%250+1)}, NodeName: ptr(fmt.Sprintf("node-%d", j%50))}
		}
		sl, err := c.Admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name + "-abc", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4, Endpoints: eps,
			Ports: []discoveryv1.EndpointPort{{Port: &port, Protocol: &proto}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, sl.Name)
	}
	return names
}

// churnBig changes one endpoint's address of perSecond slices a second, round robin, for d.
func churnBig(t *testing.T, ctx context.Context, c *harness.Cluster, ns string, slices []string, perSecond int, d time.Duration) int {
	t.Helper()
	tick := time.NewTicker(time.Second / time.Duration(perSecond))
	defer tick.Stop()
	n, failed := 0, 0
	for end := time.Now().Add(d); time.Now().Before(end); n++ {
		<-tick.C
		patch := fmt.Sprintf(`[{"op":"replace","path":"/endpoints/%d/addresses/0","value":"10.200.%d.%d"}]`, n%1000, n/250%250, n%250+1)
		if _, err := c.Admin.DiscoveryV1().EndpointSlices(ns).Patch(ctx, slices[n%len(slices)], types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			if failed++; failed > perSecond {
				t.Fatalf("churn: %d updates failed, the last: %v", failed, err)
			}
			t.Logf("churn: update failed (the test goes on): %v", err)
		}
	}
	return n
}

// The return after a cut: a node-level hub and a pool (lease mode: a leader and two followers)
// behind one black-holed link while the cloud keeps changing EndpointSlices of 1000 endpoints;
// each hub has reflector-like clients (list, then watch from the list's resourceVersion with
// bookmarks, as client-go's reflector). When the link returns the hubs resume (or re-sync) and the
// changes reach the clients as a burst far past the shared store's event window (issue 29: after
// a 150 s cut kube-proxy-like clients got ERROR 410 and relisted, 1 of 10 hubs at node level, 6 of
// 10 in lease mode). No client watch ends in 410, none lists again, and each holds exactly the
// apiserver's slices.
func TestReturnEndsNoClientWatchIn410(t *testing.T) {
	eachRelease(t, func(t *testing.T, c *harness.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		start := time.Now()
		ns := "return410"
		if err := c.EnsureNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
		for name, rule := range map[string]rbacv1.PolicyRule{
			"e2e-proxy-reader":  {APIGroups: []string{"", "discovery.k8s.io"}, Resources: []string{"services", "endpointslices"}, Verbs: []string{"get", "list", "watch"}},
			"e2e-pool-election": {APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"list", "watch"}},
		} {
			if err := c.BindNodes(ctx, name, rule); err != nil {
				t.Fatal(err)
			}
		}
		slices := bigSlices(t, ctx, c, ns, 16)
		relay, err := harness.NewRelay(strings.TrimPrefix(c.APIServers[0].URL, "https://"))
		if err != nil {
			t.Fatal(err)
		}
		defer relay.Close()
		var hubs []*poolHub
		modes := []string{"node", "lease", "lease", "lease"}
		for i, mode := range modes {
			e, err := c.NewEdge(ctx, fmt.Sprintf("r410-%d", i+1), net.IPv4(127, 0, 0, byte(20+i)), t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			ph := &poolHub{edge: e, port: harness.FreePort()}
			args := append(e.PoolArgs(mode, ph.port), "--nodepool-name=pool-r410")
			if ph.hub, err = c.StartHub(ctx, harness.HubOptions{Bin: nodehub, Dir: e.Dir, Servers: relay.URL(), Args: args}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ph.hub.Stop()
				if t.Failed() {
					t.Logf("%s (%s) log:\n%s", e.Name, mode, tailString(ph.hub.Log(), 3000))
				}
			})
			hubs = append(hubs, ph)
		}
		leader := waitLeader(t, hubs[1:], nil, 90*time.Second)
		eventually(t, 60*time.Second, "shared stores synced", func() error {
			for _, ph := range hubs {
				if v, _ := ph.hub.Metric("nodehub_pool_store_bytes"); v <= 0 {
					return fmt.Errorf("%s: store empty", ph.edge.Name)
				}
			}
			return nil
		})
		// Two clients a hub: kube-proxy's selectors, and the plain namespace's.
		cctx, stop := context.WithCancel(ctx)
		defer stop()
		var clients []*reflector
		var wg sync.WaitGroup
		defer wg.Wait()
		defer stop()
		for i, ph := range hubs {
			for _, path := range []string{"?labelSelector=" + url.QueryEscape(kubeProxySelector), ""} {
				r := &reflector{name: fmt.Sprintf("%s(%s)%s", ph.edge.Name, modes[i], path), ua: kubeProxyUA,
					path: "/apis/discovery.k8s.io/v1/namespaces/" + ns + "/endpointslices" + path}
				clients = append(clients, r)
				wg.Add(1)
				go func() { defer wg.Done(); r.run(cctx, ph.hub.ProxyURL) }()
			}
		}
		holdTruth := func(what string) {
			poll(t, 90*time.Second, what, func() error {
				sl, err := c.Admin.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
				if err != nil {
					return err
				}
				m := map[string]string{}
				for _, s := range sl.Items {
					m[s.Name] = s.ResourceVersion
				}
				want := flatten(m)
				for _, r := range clients {
					if got := r.state(); got != want {
						return fmt.Errorf("%s holds %.200s, the apiserver %.200s", r.name, got, want)
					}
				}
				return nil
			})
		}
		holdTruth("every client holds the apiserver's slices")
		t.Logf("set up in %v; the leader is %s", time.Since(start).Round(time.Second), leader.edge.Name)

		if err := relay.BlackHole(); err != nil {
			t.Fatal(err)
		}
		cut := time.Now()
		n := churnBig(t, ctx, c, ns, slices, 5, 40*time.Second)
		if err := relay.Pass(); err != nil {
			t.Fatal(err)
		}
		back := time.Now()
		t.Logf("%d slice updates (about 60 KB each) during a %v cut; link back", n, back.Sub(cut).Round(time.Second))
		holdTruth("every client holds the apiserver's slices after the return")
		t.Logf("every client holds the apiserver's slices %v after the return", time.Since(back).Round(time.Millisecond))
		stop()
		wg.Wait()
		var bad []string
		for _, r := range clients {
			r.mu.Lock()
			if len(r.expired) > 0 || r.lists != 1 {
				bad = append(bad, fmt.Sprintf("%s: %d lists, watches ended in 410: %v", r.name, r.lists, r.expired))
			}
			r.mu.Unlock()
		}
		sort.Strings(bad)
		if len(bad) > 0 {
			t.Errorf("%d of %d clients relisted:\n%s", len(bad), len(clients), strings.Join(bad, "\n"))
		}
		t.Logf("took %v", time.Since(start).Round(time.Second))
	})
}

// poll is eventually at one try a second: each try lists 6 MB of slices.
func poll(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(time.Second) {
		if err = f(); err == nil {
			return
		}
	}
	t.Fatalf("%s: not within %v: %v", what, d, err)
}
