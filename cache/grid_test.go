package cache

import (
	"testing"
	"time"
)

// A steady churn's batches are due on the grid of the interval, and a sync that cannot run at
// once waits for the grid's next moment, when the batch of the moment comes: one wake-up for
// both. A sync an interval (less an eighth) after the last runs at once; none comes sooner.
func TestSyncsWaitForTheWritersBatch(t *testing.T) {
	iv := time.Second
	g := time.Unix(1_700_000_000, 0) // on the grid
	for _, off := range []time.Duration{time.Millisecond, 400 * time.Millisecond, 999 * time.Millisecond} {
		if due := onTheGrid(g.Add(off), iv); !due.Equal(g.Add(iv)) {
			t.Errorf("a change %v past the grid is due at %v, want %v", off, due.Sub(g), iv)
		}
	}
	cases := []struct {
		last, now, want time.Duration // from g
	}{
		{0, 300 * time.Millisecond, iv},                     // a write between two batches: synced with the next
		{time.Millisecond, iv, iv},                          // the batch after a sync on the grid: at once
		{0, 900 * time.Millisecond, 900 * time.Millisecond}, // seven eighths of an interval on: at once
		{300 * time.Millisecond, iv, 2 * iv},                // after a sync off the grid, never two within seven eighths
		{-5 * iv, 300 * time.Millisecond, 300 * time.Millisecond},
	}
	for _, c := range cases {
		if at := syncAt(g.Add(c.last), g.Add(c.now), iv); !at.Equal(g.Add(c.want)) {
			t.Errorf("last sync at %v, written at %v: sync at %v, want %v", c.last, c.now, at.Sub(g), c.want)
		}
	}
}
