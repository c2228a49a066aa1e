package wire

import (
	"context"
	"testing"
	"time"
)

// KeepWatch passes again when a wake channel closes, ends when a pass says so, and ends when the
// client's context does; tick is called at every interval.
func TestKeepWatchPassesOnWakesAndEnds(t *testing.T) {
	woken := make(chan struct{})
	close(woken)
	passes := 0
	KeepWatch(context.Background(), time.Hour, time.Hour, func() (Wakes, bool) {
		passes++
		return Wakes{nil, nil, woken}, passes < 3
	}, func() bool { t.Error("tick before the interval"); return false })
	if passes != 3 {
		t.Fatalf("passes %d, want 3 (two wakes, then the pass that ends it)", passes)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	KeepWatch(ctx, time.Hour, time.Hour, func() (Wakes, bool) { return Wakes{}, true },
		func() bool { t.Error("tick after the client left"); return false })

	ticks := 0
	KeepWatch(context.Background(), time.Hour, time.Millisecond, func() (Wakes, bool) { return Wakes{}, true },
		func() bool { ticks++; return ticks < 2 })
	if ticks != 2 {
		t.Fatalf("ticks %d, want 2 (the second ends it)", ticks)
	}

	KeepWatch(context.Background(), time.Millisecond, time.Hour, func() (Wakes, bool) { return Wakes{}, true },
		func() bool { t.Error("tick before the interval"); return false })
}
