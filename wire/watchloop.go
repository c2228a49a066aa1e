package wire

import (
	"context"
	"time"
)

// Wakes are what ends a watch's wait for its next pass: each channel, once closed, says there is
// something to send (a nil channel never does).
type Wakes [3]<-chan struct{}

// KeepWatch keeps a watch answered from local data open once its initial events are out (the
// offline proxy's, hub/local, and the shared stores', pool): pass sends what came since the last
// pass and returns what wakes the next one; every interval, tick sends a bookmark. It returns
// when pass or tick returns false, ctx ends (the client left) or timeout has passed. The ticks
// come at the multiples of interval on the clock (tickIn), the same moments for every watch: the
// hub wakes once for all their bookmarks, not once per watch.
func KeepWatch(ctx context.Context, timeout, interval time.Duration, pass func() (Wakes, bool), tick func() bool) {
	end := time.NewTimer(timeout)
	defer end.Stop()
	every := time.NewTimer(tickIn(time.Now(), interval))
	defer every.Stop()
	for {
		wake, ok := pass()
		if !ok {
			return
		}
		select {
		case <-wake[0]:
		case <-wake[1]:
		case <-wake[2]:
		case <-ctx.Done():
			return
		case <-end.C:
			return
		case now := <-every.C:
			every.Reset(tickIn(now, interval))
			if !tick() {
				return
			}
		}
	}
}

// tickIn returns how long after now the next multiple of interval on the clock comes (one more
// interval when that is less than a sixteenth of it away: a tick just had its moment).
func tickIn(now time.Time, interval time.Duration) time.Duration {
	d := interval - time.Duration(now.UnixNano()%int64(interval))
	if d < interval/16 {
		d += interval
	}
	return d
}
