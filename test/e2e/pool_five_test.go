package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"nodehub/e2e/harness"
)

// poolHub is one of the five hubs of a pool run, with its clients.
type poolHub struct {
	edge    *harness.Edge
	hub     *harness.Hub
	port    int
	stop    context.CancelFunc // ends its clients
	clients []*poolClient
}

// poolEdges makes n edges of one pool: edge-1..edge-n, each its own node certificate, pool
// addresses 127.0.0.2 on.
func poolEdges(t *testing.T, ctx context.Context, n int) []*harness.Edge {
	t.Helper()
	var edges []*harness.Edge
	for i := 1; i <= n; i++ {
		e, err := cluster.NewEdge(ctx, fmt.Sprintf("edge-%d", i), net.IPv4(127, 0, 0, byte(i+1)), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		edges = append(edges, e)
	}
	return edges
}

// startPoolHubs starts one hub per edge behind relay in the given sharing mode ("none": no
// sharing at all; "node": node level only; "lease": the pool elects a leader).
func startPoolHubs(t *testing.T, ctx context.Context, mode string, edges []*harness.Edge, relay *harness.Relay) []*poolHub {
	t.Helper()
	var hubs []*poolHub
	for _, e := range edges {
		ph := &poolHub{edge: e, port: harness.FreePort()}
		h, err := cluster.StartHub(ctx, harness.HubOptions{Bin: nodehub, Dir: e.Dir, Servers: relay.URL(), Args: e.PoolArgs(mode, ph.port)})
		if err != nil {
			t.Fatal(err)
		}
		ph.hub = h
		t.Cleanup(func() {
			h.Stop()
			if t.Failed() {
				t.Logf("%s (%s) log:\n%s", e.Name, mode, tailString(h.Log(), 3000))
			}
		})
		hubs = append(hubs, ph)
	}
	for _, ph := range hubs {
		if err := ph.hub.WaitHTTP(ctx, "/v1/readyz", 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return hubs
}

// startClients starts a kube-proxy-like (protobuf) and a coredns-like (JSON) client per hub.
func startClients(t *testing.T, ctx context.Context, ns string, hubs []*poolHub) []*poolClient {
	t.Helper()
	var all []*poolClient
	for _, ph := range hubs {
		cctx, cancel := context.WithCancel(ctx)
		ph.stop = cancel
		t.Cleanup(cancel)
		ph.clients = []*poolClient{
			startPoolClient(t, cctx, ph.edge.Name+"/kube-proxy", ph.hub.Client(kubeProxyUA, true), ns),
			startPoolClient(t, cctx, ph.edge.Name+"/coredns", kubernetes.NewForConfigOrDie(ph.hub.Config(corednsUA, false)), ns),
		}
		all = append(all, ph.clients...)
	}
	return all
}

func roleOf(ph *poolHub) string {
	for _, r := range []string{"leader", "follower", "none"} {
		if v, _ := ph.hub.Metric(`nodehub_pool_role{role="` + r + `"}`); v == 1 {
			return r
		}
	}
	return ""
}

func rssKiB(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

// Five hubs (edge-1..edge-5, each its own node certificate, pool addresses 127.0.0.2–6) with a
// kube-proxy-like and a coredns-like client each, while admin churns 10 EndpointSlices per
// second: every client ends with exactly the apiserver's state, in each of three modes; the
// cloud bytes (counted by a relay in front of the apiserver) are compared; in lease mode the
// leader is SIGKILLed, followers carry on from the cloud and a new leader takes over; a peer
// without a node certificate cannot read from the leader.
func TestPoolFiveHubsLeaseSharingAndFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	ns := "pool-five"
	slices := poolFixture(t, ctx, ns, 20)
	bindNodes(t, "e2e-pool-election", rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"list", "watch"}})
	edges := poolEdges(t, ctx, 5)
	target := strings.TrimPrefix(cluster.APIServers[0].URL, "https://")
	churnFor := 20 * time.Second
	if s := os.Getenv("NODEHUB_POOL_CHURN"); s != "" { // e.g. 3s for a quicker run
		churnFor, _ = time.ParseDuration(s)
	}
	figures := map[string]int64{}
	for _, mode := range []string{"none", "node", "lease"} {
		relay, err := harness.NewRelay(target)
		if err != nil {
			t.Fatal(err)
		}
		hubs := startPoolHubs(t, ctx, mode, edges, relay)
		if mode != "none" {
			eventually(t, 60*time.Second, mode+": shared stores synced", func() error {
				leaders := 0
				for _, ph := range hubs {
					if v, _ := ph.hub.Metric("nodehub_pool_store_bytes"); v <= 0 {
						return fmt.Errorf("%s: store empty", ph.edge.Name)
					}
					if r := roleOf(ph); mode == "lease" && r != "leader" && r != "follower" {
						return fmt.Errorf("%s: role %q", ph.edge.Name, r)
					} else if r == "leader" {
						leaders++
					}
				}
				if mode == "lease" && leaders != 1 {
					return fmt.Errorf("%d leaders", leaders)
				}
				return nil
			})
		}
		clients := startClients(t, ctx, ns, hubs)
		start := relay.FromServer.Load()
		n := churn(t, ctx, ns, slices, 10, churnFor)
		converge(t, ctx, ns, clients)
		figures[mode] = relay.FromServer.Load() - start
		t.Logf("%s: %d slice updates in %v; 10 clients converged; cloud bytes during churn %d (%d since start)", mode, n, churnFor, figures[mode], relay.FromServer.Load())
		if mode == "lease" {
			failover(t, ctx, ns, slices, hubs, edges)
		}
		for _, ph := range hubs {
			ph.stop()
			ph.hub.Stop()
		}
		relay.Close()
	}
	cut := 1 - float64(figures["lease"])/float64(figures["none"])
	t.Logf("cloud bytes during churn: no sharing %d, node sharing %d (%.0f%% less), lease %d (%.0f%% less)",
		figures["none"], figures["node"], 100*(1-float64(figures["node"])/float64(figures["none"])), figures["lease"], 100*cut)
	if cut < 0.75 {
		t.Errorf("lease sharing cut cloud bytes by %.0f%%, want ≥ 75%%", 100*cut)
	}
}

// leaderOf returns the hub that says it leads and the others.
func leaderOf(t *testing.T, hubs []*poolHub) (*poolHub, []*poolHub) {
	t.Helper()
	var leader *poolHub
	var rest []*poolHub
	for _, ph := range hubs {
		if roleOf(ph) == "leader" {
			leader = ph
		} else {
			rest = append(rest, ph)
		}
	}
	if leader == nil {
		t.Fatal("no leader")
	}
	return leader, rest
}

// nextChange patches one slice and returns how long until every client holds the change.
func nextChange(t *testing.T, ctx context.Context, ns, slice string, hubs []*poolHub) time.Duration {
	t.Helper()
	start := time.Now()
	patch := fmt.Sprintf(`{"metadata":{"labels":{"failover":"%d"}}}`, start.UnixNano())
	sl, err := cluster.Admin.DiscoveryV1().EndpointSlices(ns).Patch(ctx, slice, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "every client gets the change", func() error {
		for _, ph := range hubs {
			for _, c := range ph.clients {
				c.mu.Lock()
				rv := c.seen["slice/"+sl.Name]
				c.mu.Unlock()
				if rv != sl.ResourceVersion {
					return fmt.Errorf("%s has %s at %s, want %s", c.name, sl.Name, rv, sl.ResourceVersion)
				}
			}
		}
		return nil
	})
	return time.Since(start)
}

// waitLeader waits until every hub agrees that want leads (any hub but the excluded ones when
// want is nil) and returns the leader.
func waitLeader(t *testing.T, hubs []*poolHub, want *poolHub, d time.Duration) *poolHub {
	t.Helper()
	var leader *poolHub
	eventually(t, d, "one leader all hubs follow", func() error {
		leader = nil
		for _, ph := range hubs {
			if roleOf(ph) == "leader" {
				if leader != nil {
					return fmt.Errorf("two leaders: %s and %s", leader.edge.Name, ph.edge.Name)
				}
				leader = ph
			}
		}
		if leader == nil || want != nil && leader != want {
			name := func(ph *poolHub) string {
				if ph == nil {
					return "none"
				}
				return ph.edge.Name
			}
			return fmt.Errorf("leader %s, want %s", name(leader), name(want))
		}
		for _, ph := range hubs {
			if ph != leader && roleOf(ph) != "follower" {
				return fmt.Errorf("%s is %s", ph.edge.Name, roleOf(ph))
			}
		}
		return nil
	})
	return leader
}

// failover partitions the leader (SIGSTOP: connections stay open, nothing flows), then kills it
// (SIGKILL): each time the followers' clients keep getting changes (from the cloud at first) and
// a new leader is elected; a partitioned leader that comes back leads again. Only node
// identities can read from the leader.
func failover(t *testing.T, ctx context.Context, ns string, slices []string, hubs []*poolHub, edges []*harness.Edge) {
	leader, rest := leaderOf(t, hubs)
	if v := metricOr(leader.hub, "nodehub_pool_follower_watches"); v != 2*float64(len(rest)) {
		t.Errorf("the leader serves %v followers' watches, want %d (two resources per follower)", v, 2*len(rest))
	}
	t.Logf("leader %s RSS %d KiB; store %v bytes, window %v bytes", leader.edge.Name, rssKiB(leader.hub.Pid()),
		metricOr(leader.hub, "nodehub_pool_store_bytes"), metricOr(leader.hub, "nodehub_pool_window_bytes"))

	if err := leader.hub.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	d := nextChange(t, ctx, ns, slices[2], rest)
	t.Logf("leader partitioned (SIGSTOP): followers' clients had the next change after %v", d.Round(time.Millisecond))
	if d > 7*time.Second {
		t.Errorf("followers of a silent leader took %v to continue, want ≤ --pool-leader-timeout (5s) + 2s", d)
	}
	stand := waitLeader(t, rest, nil, 90*time.Second)
	t.Logf("stand-in leader %s after %v", stand.edge.Name, time.Since(frozen).Round(time.Millisecond))
	if err := leader.hub.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	waitLeader(t, hubs, leader, 60*time.Second)
	t.Logf("the partitioned leader is back and leads again after %v", time.Since(back).Round(time.Millisecond))
	churn(t, ctx, ns, slices, 10, 3*time.Second)
	var all []*poolClient
	for _, ph := range hubs {
		all = append(all, ph.clients...)
	}
	converge(t, ctx, ns, all)

	leader.stop()
	leader.hub.Kill()
	killed := time.Now()
	d = nextChange(t, ctx, ns, slices[1], rest)
	t.Logf("leader killed (SIGKILL): followers' clients had the next change after %v", d.Round(time.Millisecond))
	if d > 5*time.Second {
		t.Errorf("followers took %v to continue, want ≤ 5s", d)
	}
	newLeader := waitLeader(t, rest, nil, 90*time.Second)
	t.Logf("new leader %s after %v", newLeader.edge.Name, time.Since(killed).Round(time.Millisecond))
	var clients []*poolClient
	for _, ph := range rest {
		clients = append(clients, ph.clients...)
	}
	churn(t, ctx, ns, slices, 10, 5*time.Second)
	converge(t, ctx, ns, clients)

	// Only node identities read from the leader.
	addr := fmt.Sprintf("https://%s:%d/apis/discovery.k8s.io/v1/endpointslices", newLeader.edge.IP, newLeader.port)
	pool := x509.NewCertPool()
	pool.AddCert(cluster.PKI.CA)
	get := func(certFile, keyFile string) (int, error) {
		cfg := &tls.Config{RootCAs: pool}
		if certFile != "" {
			c, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return 0, err
			}
			cfg.Certificates = []tls.Certificate{c}
		}
		cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
		defer cl.CloseIdleConnections()
		resp, err := cl.Get(addr)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := get(edges[0].Cert, edges[0].Key); err != nil || code != http.StatusOK {
		t.Errorf("a node certificate: %d %v, want 200", code, err)
	}
	if code, err := get(cluster.AdminCert, cluster.AdminKey); err == nil {
		t.Errorf("an admin (non-node) certificate read from the leader: %d", code)
	}
	if code, err := get("", ""); err == nil {
		t.Errorf("no client certificate read from the leader: %d", code)
	}
	other, err := harness.NewPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fc, fk, _ := other.Issue("forged", "system:node:edge-9", []string{"system:nodes"}, nil, nil)
	if code, err := get(fc, fk); err == nil {
		t.Errorf("a node certificate from another CA read from the leader: %d", code)
	}
}

// nodepool mode: the hubs follow the leader yurt-manager publishes in the NodePool's
// status.leaderEndpoints, and move when it changes.
func TestPoolNodePoolModeFollowsPublishedLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := "pool-np"
	poolFixture(t, ctx, ns, 3)
	makeNodePool(t, ctx, "pool-np-lead")
	// The administrator names the members; yurt-manager lists the pool's nodes.
	for path, body := range map[string]string{
		"":        `{"metadata":{"annotations":{"nodehub.io/members":"edge-1,edge-2"}}}`,
		"/status": `{"status":{"nodes":["edge-1","edge-2"]}}`,
	} {
		if err := cluster.Admin.RESTClient().Patch(types.MergePatchType).AbsPath("/apis/apps.openyurt.io/v1beta2/nodepools/pool-np-lead" + path).Body([]byte(body)).Do(ctx).Error(); err != nil {
			t.Fatal(err)
		}
	}
	var hubs []*poolHub
	for i := 1; i <= 2; i++ {
		e, err := cluster.NewEdge(ctx, fmt.Sprintf("edge-%d", i), net.IPv4(127, 0, 0, byte(i+1)), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		ph := &poolHub{edge: e, port: harness.FreePort()}
		ph.hub = startHubIn(t, e.Dir, "", append(e.Args(), "--nodepool-name=pool-np-lead", "--pool-mode=nodepool",
			"--pool-bind-address="+e.IP.String(), "--pool-port="+strconv.Itoa(ph.port), "--pool-leader-timeout=1s")...)
		hubs = append(hubs, ph)
	}
	// lead publishes leader as the pool's leader and waits until follower reads from it.
	lead := func(leader, follower *poolHub) {
		status := fmt.Sprintf(`{"status":{"leaderEndpoints":[{"nodeName":%q,"address":"%s:%d"}]}}`, leader.edge.Name, leader.edge.IP, leader.port)
		if err := cluster.Admin.RESTClient().Patch(types.MergePatchType).AbsPath("/apis/apps.openyurt.io/v1beta2/nodepools/pool-np-lead/status").Body([]byte(status)).Do(ctx).Error(); err != nil {
			t.Fatal(err)
		}
		waitLeader(t, hubs, leader, 30*time.Second)
		eventually(t, 30*time.Second, follower.edge.Name+" reads from the leader", func() error {
			if v := metricOr(follower.hub, `nodehub_pool_received_bytes_total{source="leader",resource="endpointslices"}`); v <= 0 {
				return fmt.Errorf("no bytes from the leader yet")
			}
			return nil
		})
	}
	lead(hubs[0], hubs[1])
	startClients(t, ctx, ns, hubs)
	lead(hubs[1], hubs[0])
	churn(t, ctx, ns, []string{"s00-abc", "s01-abc", "s02-abc"}, 10, 2*time.Second)
	converge(t, ctx, ns, append(hubs[0].clients, hubs[1].clients...))
}
