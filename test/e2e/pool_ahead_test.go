package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"nodehub/e2e/harness"
)

// An etcd restored from a backup puts the hub's shared store ahead of the apiserver: its watch
// from a resourceVersion the apiserver has not reached is answered 200 and says nothing. The
// store notices (no bookmark for 3 minutes) and lists the apiserver's current state: kube-proxy
// gets the restored cluster's services, and a service created after the restore (at a
// resourceVersion below the store's), not the ones the restore undid. Its own control plane:
// the restore undoes what other tests made.
func TestPoolStoreAheadOfARestoredEtcdListsAgain(t *testing.T) {
	// One release (v1.37, where the issue measured it): the test runs a control plane of its own
	// for ~5 minutes (the store's 3-minute watchdog), and the store's code is the same for both.
	t.Run("v1.37", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
		defer cancel()
		dir := t.TempDir()
		r := clusterRelease(t)
		c, err := harness.StartClusterAt(ctx, r, dir, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Stop()
		ns := "restored"
		if err := c.EnsureNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
		if err := c.BindNodes(ctx, "nodehub-pool-scope", rbacv1.PolicyRule{APIGroups: []string{"", "discovery.k8s.io"},
			Resources: []string{"services", "endpointslices"}, Verbs: []string{"get", "list", "watch"}}); err != nil {
			t.Fatal(err)
		}
		etcdDir, backup := filepath.Join(dir, "etcd"), filepath.Join(dir, "etcd-backup")
		a := c.APIServers[0]
		// The backup: etcd stopped, its data directory copied.
		a.Stop()
		c.Etcd.Stop()
		runCmd(t, "cp", "-a", etcdDir, backup)
		startPlane(t, ctx, c)

		h := startHubOn(t, c, t.TempDir(), "")
		kp := h.Client(kubeProxyUA, true)
		for i := 0; i < 30; i++ {
			createService(t, ctx, c, ns, fmt.Sprintf("undone-%02d", i))
		}
		eventually(t, time.Minute, "the undone services through the hub's store", func() error {
			return servicesAre(ctx, kp, ns, 30, "undone-29")
		})
		// Long enough for the apiserver's periodic bookmark (about every minute): the store knows
		// its upstream sends them.
		time.Sleep(75 * time.Second)

		// The restore: the apiserver stopped, etcd's data replaced by the backup, both started.
		a.Stop()
		c.Etcd.Stop()
		runCmd(t, "rm", "-rf", etcdDir)
		runCmd(t, "cp", "-a", backup, etcdDir)
		startPlane(t, ctx, c)
		createService(t, ctx, c, ns, "after-restore")
		eventually(t, 6*time.Minute, "the restored state through the hub's store", func() error {
			return servicesAre(ctx, kp, ns, 1, "after-restore")
		})
		if code, body, err := h.Get("/v1/readyz"); err != nil || code != 200 {
			t.Errorf("readyz after the store listed again: %d %q %v", code, body, err)
		}
	})
}

// clusterRelease is the release of the running subtest's control plane.
func clusterRelease(t *testing.T) harness.Release {
	t.Helper()
	r, err := harness.ReleaseNamed(filepath.Base(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func runCmd(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// startPlane starts a stopped control plane's etcd and apiserver and waits until it is ready.
func startPlane(t *testing.T, ctx context.Context, c *harness.Cluster) {
	t.Helper()
	if err := c.Etcd.Start(); err != nil {
		t.Fatal(err)
	}
	a := c.APIServers[0]
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, a, 90*time.Second); err != nil {
		t.Fatal(err)
	}
}

func createService(t *testing.T, ctx context.Context, c *harness.Cluster, ns, name string) {
	t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	if _, err := c.Admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// servicesAre checks that a list of ns's services has n items, one of them named has.
func servicesAre(ctx context.Context, cs kubernetes.Interface, ns string, n int, has string) error {
	l, err := cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	found := false
	for _, s := range l.Items {
		found = found || s.Name == has
	}
	if len(l.Items) != n || !found {
		return fmt.Errorf("%d services at resourceVersion %s, want %d with %s", len(l.Items), l.ResourceVersion, n, has)
	}
	return nil
}
