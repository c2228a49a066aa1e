package cache

import "time"

// The writer's batches are due, and the store's syncs wait for, the same moments: the multiples
// of the interval on the clock. Under a steady churn of events the hub then wakes once an interval
// for both (the batch written, then synced at once), not twice: each wake-up of an idle hub costs
// more CPU than the writes themselves (docs/figures.md, the node profile's CPU).

// onTheGrid returns the first multiple of d on the clock after t (t itself when d is not positive).
func onTheGrid(t time.Time, d time.Duration) time.Time {
	if d <= 0 {
		return t
	}
	return t.Add(d - time.Duration(t.UnixNano()%int64(d)))
}

// syncAt returns when to sync what was written by now, the last sync having been at last: at once
// when that is an interval old (almost: an eighth of it is tolerated), else at the first multiple
// of the interval on the clock at least seven eighths of it after the last — when the writer's
// batch of the moment comes too.
func syncAt(last, now time.Time, interval time.Duration) time.Time {
	soonest := last.Add(interval - interval/8)
	if !now.Before(soonest) {
		return now
	}
	return onTheGrid(soonest.Add(-1), interval)
}
