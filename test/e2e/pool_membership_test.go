package e2e

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"nodehub/e2e/harness"
)

// Lease mode elects nobody until the pool's NodePool names its members: a hub that labelled its
// own Lease with the pool (any node can) does not lead while no NodePool exists, nor while the
// NodePool lists other nodes, nor while it lists this one in status.nodes (which follows a label
// any node can set on itself) but the administrator has not named it (annotation
// nodehub.io/members); it leads once both do.
func TestPoolLeaseModeElectsOnlyNodePoolMembers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bindNodes(t, "e2e-pool-election", rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"list", "watch"}})
	const pool = "pool-members"
	// OpenYurt is installed (the NodePool API served, readable by the nodes); the pool's NodePool
	// does not exist yet. (A NodePool API the cloud refuses is asked for again only after a
	// minute, then less and less often: pool's TestElectionAsksForAMissingNodePoolRarely.)
	nodePoolAPI(t, ctx)
	// A serving certificate for its pool address: a hub without one does not stand.
	dir := t.TempDir()
	servingCertIn(t, dir, harness.NodeName, net.IPv4(127, 0, 0, 1))
	h := startHubIn(t, dir, "", "--nodepool-name="+pool, "--pool-mode=lease", "--pool-bind-address=127.0.0.1",
		"--pool-port="+strconv.Itoa(harness.FreePort()), "--pool-leader-timeout=1s")
	role := func() string {
		for _, r := range []string{"leader", "follower", "none"} {
			if v, _ := h.Metric(`nodehub_pool_role{role="` + r + `"}`); v == 1 {
				return r
			}
		}
		return "?"
	}
	never := func(d time.Duration, what string) {
		t.Helper()
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			if r := role(); r == "leader" || r == "follower" {
				t.Fatalf("%s: role %s", what, r)
			}
		}
	}
	// The hub's own lease carries the pool's label: without a NodePool it is no proof.
	eventually(t, 20*time.Second, "the hub's lease labelled with the pool", func() error {
		l, err := cluster.Admin.CoordinationV1().Leases("kube-node-lease").Get(ctx, harness.NodeName, metav1.GetOptions{})
		if err != nil || l.Labels["nodehub.io/pool"] != pool {
			return fmt.Errorf("lease %v: %v", l.GetLabels(), err)
		}
		return nil
	})
	never(6*time.Second, "no NodePool")
	if !strings.Contains(h.Log(), "lease mode elects no leader") {
		t.Fatal("the refusal is not logged")
	}
	makeNodePool(t, ctx, pool)
	setNodes := func(nodes string) {
		status := `{"status":{"nodes":[` + nodes + `]}}`
		if err := cluster.Admin.RESTClient().Patch(types.MergePatchType).AbsPath("/apis/apps.openyurt.io/v1beta2/nodepools/" + pool + "/status").Body([]byte(status)).Do(ctx).Error(); err != nil {
			t.Fatal(err)
		}
	}
	setNodes(`"edge-9"`)
	never(6*time.Second, "a NodePool naming other nodes")
	// In status.nodes (any node can label itself into it) but not named by the administrator.
	setNodes(`"edge-9","` + harness.NodeName + `"`)
	never(6*time.Second, "a NodePool naming no members")
	if !strings.Contains(h.Log(), "names no members") {
		t.Fatal("the NodePool naming no members is not logged")
	}
	members := `{"metadata":{"annotations":{"nodehub.io/members":"edge-9,` + harness.NodeName + `"}}}`
	if err := cluster.Admin.RESTClient().Patch(types.MergePatchType).AbsPath("/apis/apps.openyurt.io/v1beta2/nodepools/" + pool).Body([]byte(members)).Do(ctx).Error(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the hub leads once the NodePool names it", func() error {
		if r := role(); r != "leader" {
			return fmt.Errorf("role %s", r)
		}
		return nil
	})
}
