package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"nodehub/e2e/harness"
)

// Issue 28 (6): a node puts itself in any pool — with its own certificate it removes and re-adds
// the apps.openyurt.io/nodepool label on its Node (NodeRestriction allows it), and yurt-manager
// lists it in the NodePool's status.nodes. Only the nodes an administrator named on the NodePool
// (annotation nodehub.io/members, which a node cannot write) lead the pool or file notes: the
// intruder, sorting first, is not elected and its note is refused; the named members elect and
// share.
func TestPoolNodeLabellingItselfInIsNoMember(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bindNodes(t, "e2e-pool-election", rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"list", "watch"}})
	const pool = "pool-named"
	const npPath = "/apis/apps.openyurt.io/v1beta2/nodepools/" + pool
	makeNodePool(t, ctx, pool)
	admin := func(path, body string) {
		t.Helper()
		if err := cluster.Admin.RESTClient().Patch(types.MergePatchType).AbsPath(path).Body([]byte(body)).Do(ctx).Error(); err != nil {
			t.Fatal(err)
		}
	}
	admin(npPath, `{"metadata":{"annotations":{"nodehub.io/members":"edge-2,edge-3,edge-4"}}}`)
	// edge-1, the intruder, sorts first; edge-4 is a named member without a hub (its notes are
	// the test's own).
	var edges []*harness.Edge
	for i := 1; i <= 4; i++ {
		e, err := cluster.NewEdge(ctx, fmt.Sprintf("edge-%d", i), net.IPv4(127, 0, 0, byte(i+1)), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		edges = append(edges, e)
	}
	intruder := kubernetes.NewForConfigOrDie(&rest.Config{Host: cluster.APIServers[0].URL, TLSClientConfig: rest.TLSClientConfig{
		CAFile: cluster.PKI.CAFile, CertFile: edges[0].Cert, KeyFile: edges[0].Key}})
	t.Cleanup(func() {
		_, _ = cluster.Admin.CoreV1().Nodes().Patch(context.Background(), "edge-1", types.MergePatchType, []byte(`{"metadata":{"labels":{"apps.openyurt.io/nodepool":null}}}`), metav1.PatchOptions{})
	})
	for _, v := range []string{"null", strconv.Quote(pool)} {
		patch := `{"metadata":{"labels":{"apps.openyurt.io/nodepool":` + v + `}}}`
		if _, err := intruder.CoreV1().Nodes().Patch(ctx, "edge-1", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatalf("the node relabelling itself (%s): %v", v, err)
		}
	}
	// The NodePool it cannot write.
	err := intruder.CoreV1().RESTClient().Patch(types.MergePatchType).AbsPath(npPath).
		Body([]byte(`{"metadata":{"annotations":{"nodehub.io/members":"edge-1"}}}`)).Do(ctx).Error()
	if !apierrors.IsForbidden(err) {
		t.Fatalf("a node annotated its NodePool: %v, want 403", err)
	}
	// yurt-manager (played here) lists the labelled nodes.
	admin(npPath+"/status", `{"status":{"nodes":["edge-1","edge-2","edge-3","edge-4"]}}`)
	var hubs []*poolHub
	for _, e := range edges[:3] {
		ph := &poolHub{edge: e, port: harness.FreePort()}
		ph.hub = startHubIn(t, e.Dir, "", append(e.Args(), "--nodepool-name="+pool, "--pool-mode=lease", "--heartbeat-interval-seconds=10",
			"--kubelet-health-grace-period=1h", "--pool-bind-address="+e.IP.String(), "--pool-port="+strconv.Itoa(ph.port), "--pool-leader-timeout=1s")...)
		hubs = append(hubs, ph)
	}
	leader := waitLeader(t, hubs, hubs[1], 90*time.Second)
	eventually(t, 30*time.Second, "the intruder reads from the leader", func() error {
		if v := metricOr(hubs[0].hub, `nodehub_pool_received_bytes_total{source="leader",resource="endpointslices"}`); v <= 0 {
			return fmt.Errorf("no bytes from the leader yet")
		}
		return nil
	})
	notes := notesClient(t, fmt.Sprintf("https://%s:%d/pool/v1/notes", leader.edge.IP, leader.port))
	if code, body := notes(edges[0], http.MethodPut, []byte(`{"forged":true}`)); code != http.StatusForbidden {
		t.Fatalf("the intruder's note: %d %s, want 403", code, body)
	}
	if code, body := notes(edges[3], http.MethodPut, []byte(`{"member":true}`)); code != http.StatusNoContent {
		t.Fatalf("a named member's note: %d %s, want 204", code, body)
	}
	_, body := notes(edges[3], http.MethodGet, nil)
	var ans struct{ Notes map[string][]byte }
	if err := json.Unmarshal(body, &ans); err != nil || string(ans.Notes["edge-4"]) != `{"member":true}` || ans.Notes["edge-1"] != nil {
		t.Fatalf("the pool's notes %s (%v): want edge-4's, not edge-1's", body, err)
	}
}

// notesClient returns a function that sends one request to a leader's notes as an edge (its node
// certificate) and returns the answer's code and body.
func notesClient(t *testing.T, url string) func(e *harness.Edge, method string, body []byte) (int, []byte) {
	pool := x509.NewCertPool()
	pool.AddCert(cluster.PKI.CA)
	return func(e *harness.Edge, method string, body []byte) (int, []byte) {
		t.Helper()
		c, err := tls.LoadX509KeyPair(e.Cert, e.Key)
		if err != nil {
			t.Fatal(err)
		}
		cl := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{c}}}}
		defer cl.CloseIdleConnections()
		req, err := http.NewRequest(method, url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
}
