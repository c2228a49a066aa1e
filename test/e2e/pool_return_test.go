package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/kubernetes"

	"nodehub/e2e/harness"
)

// apiserverCounts reads the apiserver's own account of requests for resource: completed requests
// by verb (apiserver_request_total) and the watches open now (apiserver_longrunning_requests).
type apiserverCounts struct {
	done map[string]float64 // verb → completed requests
	open float64            // WATCHes open
}

func readAPIServerCounts(t *testing.T, ctx context.Context, resource string) apiserverCounts {
	t.Helper()
	raw, err := cluster.Admin.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := apiserverCounts{done: map[string]float64{}}
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `resource="`+resource+`"`) || strings.Contains(line, `subresource="status"`) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		verb := between(line, `verb="`, `"`)
		switch {
		case strings.HasPrefix(line, "apiserver_request_total{"):
			c.done[verb] += v
		case strings.HasPrefix(line, "apiserver_longrunning_requests{") && verb == "WATCH":
			c.open += v
		}
	}
	return c
}

func between(s, from, to string) string {
	i := strings.Index(s, from)
	if i < 0 {
		return ""
	}
	s = s[i+len(from):]
	j := strings.Index(s, to)
	if j < 0 {
		return ""
	}
	return s[:j]
}

// started is how many requests of verb the apiserver began between two readings: those completed
// since, plus (for watches) those open at the end, less those open at the start.
func started(a, b apiserverCounts, verb string) float64 {
	n := b.done[verb] - a.done[verb]
	if verb == "WATCH" {
		n += b.open - a.open
	}
	return n
}

// A region's return: five hubs of one pool (lease mode) with a kube-proxy-like and a coredns-like
// client each; the link of the whole region is black-holed while the apiserver runs on and the
// EndpointSlices keep changing past its watch cache's history (~75 s); then the link returns.
// The apiserver's own metrics count what the return cost it: the pool's leader resumes its watch,
// gets 410, and re-syncs once (a watch-list, or one LIST where the server has none); the
// followers read nothing from the cloud (they carry on from the leader, whose lease ran out
// during the cut); no client lists again (each gets the difference as events), and every client
// holds the apiserver's state and a change made after the return.
func TestPoolRegionReturn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	ns := "pool-return"
	slices := poolFixture(t, ctx, ns, 20)
	bindNodes(t, "e2e-pool-election", rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"list", "watch"}})
	edges := poolEdges(t, ctx, 5)
	relay, err := harness.NewRelay(strings.TrimPrefix(cluster.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	hubs := startPoolHubs(t, ctx, "lease", edges, relay)
	leader := waitLeader(t, hubs, nil, 90*time.Second)
	eventually(t, 60*time.Second, "shared stores synced", func() error {
		for _, ph := range hubs {
			if v, _ := ph.hub.Metric("nodehub_pool_store_bytes"); v <= 0 {
				return fmt.Errorf("%s: store empty", ph.edge.Name)
			}
		}
		return nil
	})
	clients := startClients(t, ctx, ns, hubs)
	converge(t, ctx, ns, clients)
	// The truth is read from the other apiserver: the one behind the relay counts only the hubs'
	// requests (and the test's writes).
	other := kubernetes.NewForConfigOrDie(cluster.ConfigFor(cluster.APIServers[1].URL))

	clientLists := func() (n float64) {
		for _, ph := range hubs {
			for _, r := range []string{"services", "endpointslices"} {
				n += metricOr(ph.hub, `nodehub_pool_requests_total{verb="list",resource="`+r+`"}`)
			}
		}
		return n
	}
	followersFromCloud := func() (n float64) {
		for _, ph := range hubs {
			if ph != leader {
				for _, r := range []string{"services", "endpointslices"} {
					n += metricOr(ph.hub, `nodehub_pool_received_bytes_total{source="cloud",resource="`+r+`"}`)
				}
			}
		}
		return n
	}
	listsBefore, followersBefore := clientLists(), followersFromCloud()

	cut := 100 * time.Second
	if s := os.Getenv("NODEHUB_RETURN_CUT"); s != "" {
		cut, _ = time.ParseDuration(s)
	}
	if err := relay.BlackHole(); err != nil {
		t.Fatal(err)
	}
	t.Logf("link black-holed for %v; the leader is %s; 5 slice updates/s meanwhile", cut, leader.edge.Name)
	n := churn(t, ctx, ns, slices, 5, cut)
	before := map[string]apiserverCounts{}
	for _, r := range []string{"endpointslices", "services", "leases"} {
		before[r] = readAPIServerCounts(t, ctx, r)
	}
	fromServer := relay.FromServer.Load()
	if err := relay.Pass(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	t.Logf("%d slice updates during the cut; link back", n)
	convergeWith(t, ctx, other, ns, clients)
	t.Logf("every client holds the apiserver's state %v after the return", time.Since(back).Round(time.Millisecond))
	for time.Since(back) < 3*time.Second {
		time.Sleep(100 * time.Millisecond)
	}
	d := nextChange(t, ctx, ns, slices[3], hubs)
	t.Logf("a change made %v after the return reached every client in %v", time.Since(back).Round(time.Second)-d.Round(time.Second), d.Round(time.Millisecond))
	convergeWith(t, ctx, other, ns, clients)

	for _, r := range []string{"endpointslices", "services", "leases"} {
		after := readAPIServerCounts(t, ctx, r)
		lists, watches := started(before[r], after, "LIST"), started(before[r], after, "WATCH")
		t.Logf("the return cost the apiserver for %s: %.0f LISTs, %.0f WATCHes", r, lists, watches)
		if r == "leases" {
			if watches > 0 {
				t.Errorf("leases: %.0f WATCHes on the return, want none (the election watches no lease)", watches)
			}
			continue
		}
		if lists > 1 {
			t.Errorf("%s: %.0f LISTs on the return, want at most one for the pool (none with watch-lists)", r, lists)
		}
		// The leader's few (resume, then one watch-list); the topology sources follow the shared
		// store of services, none watches services itself.
		if watches > 4 {
			t.Errorf("%s: %.0f WATCHes on the return, want at most 4 (the leader's, whatever the pool's size)", r, watches)
		}
	}
	t.Logf("cloud → edge bytes from the return until every client held the change: %d", relay.FromServer.Load()-fromServer)
	if got := followersFromCloud() - followersBefore; got != 0 {
		t.Errorf("followers read %.0f bytes of pool-scope resources from the cloud on the return, want none (they read from the leader)", got)
	}
	if got := clientLists() - listsBefore; got != 0 {
		t.Errorf("clients listed %.0f times on the return, want none (the difference reaches them as events)", got)
	}
	if r := roleOf(leader); r != "leader" {
		t.Errorf("%s, the leader before the cut, is %q after it", leader.edge.Name, r)
	}
}
