package hub

import (
	"context"
	"strings"
	"testing"
	"time"

	"nodehub/pool"
)

// With the services shared, the topology source follows the shared store: the cloud gets no
// list or watch of services from it, only the store's own.
func TestTopologyFollowsTheSharedStore(t *testing.T) {
	f := newProxyFixture(t, func(c *Config) {
		c.Filters = filterConfig()
		c.Pool.Resources = []pool.Resource{{Version: "v1", Resource: "services"}}
	})
	ctx := f.runPool(t)
	f.cloud.took()
	tctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); f.hub.topo.Run(tctx) }()
	defer cancel()
	select {
	case <-f.hub.topo.Synced():
	case <-time.After(30 * time.Second):
		t.Fatal("the topology did not load")
	}
	cancel()
	<-done
	for _, r := range f.cloud.took() {
		if strings.Contains(r.uri, "services") && r.ua != "nodehub/pool" {
			t.Fatalf("the cloud got %s %s from %s", r.method, r.uri, r.ua)
		}
	}
}
