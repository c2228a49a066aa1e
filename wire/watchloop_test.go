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

// Watches opened at different moments tick at the same moments, the multiples of the interval on
// the clock: the hub wakes once for all their bookmarks. A tick that fires a hair past its moment
// (or before it: the wall clock slewed) sets the next a whole interval on, never at once.
func TestWatchesTickTogether(t *testing.T) {
	iv := 10 * time.Second
	base := time.Unix(1_700_000_000, 0) // a multiple of 10 s
	for _, off := range []time.Duration{time.Millisecond, 3 * time.Second, 9*time.Second + 300*time.Millisecond} {
		now := base.Add(off)
		if at := now.Add(tickIn(now, iv)); !at.Equal(base.Add(iv)) {
			t.Errorf("a watch opened %v past a multiple ticks at %v, want %v", off, at.Sub(base), iv)
		}
	}
	for _, off := range []time.Duration{iv + time.Microsecond, iv - time.Microsecond} {
		now := base.Add(off)
		if at := now.Add(tickIn(now, iv)); !at.Equal(base.Add(2 * iv)) {
			t.Errorf("a tick at %v sets the next at %v, want %v", off, at.Sub(base), 2*iv)
		}
	}
}
