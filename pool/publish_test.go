package pool

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// Issue 29 (5): a hub that takes the lead renews its lease at once (Config.Publish), with the
// leader's mark and its pool address OnRole has just set: its followers, which wait for the
// address and read the cloud meanwhile, do not wait a heartbeat more. Following, or leading on,
// publishes nothing.
func TestTakingTheLeadPublishesAtOnce(t *testing.T) {
	var published []string // the role OnRole last gave when Publish was called
	role := ""
	p, err := New(Config{Mode: ModeLease, NodeName: "edge-1", PoolName: "p", Addr: "10.0.0.1:10269", SelfDeclared: true,
		Cloud:   func(*http.Request) (*http.Response, error) { return nil, fmt.Errorf("offline") },
		OnRole:  func(r, _ string) { role = r },
		Publish: func(context.Context) error { published = append(published, role); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	f := &fakeLeases{at: now}
	f.set("edge-1", "10.0.0.1:10269", now, false)
	f.set("edge-2", "10.0.0.2:10269", now, false)
	e := &elector{p: p, passed: map[string]string{}, list: f.list, canServe: servable, settleFor: new(time.Duration)}
	ctx := context.Background()
	e.round(ctx, now)
	if !p.Leading() || len(published) != 1 || published[0] != "leader" {
		t.Fatalf("leading %v; published %v times (roles %q), want once, after OnRole said leader", p.Leading(), len(published), published)
	}
	f.set("edge-1", "10.0.0.1:10269", now, true) // its mark on the cloud
	e.round(ctx, now)
	if !p.Leading() || len(published) != 1 {
		t.Fatalf("leading on: published %d times, want still once", len(published))
	}
}
