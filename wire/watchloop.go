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
// when pass or tick returns false, ctx ends (the client left) or timeout has passed.
func KeepWatch(ctx context.Context, timeout, interval time.Duration, pass func() (Wakes, bool), tick func() bool) {
	end := time.NewTimer(timeout)
	defer end.Stop()
	every := time.NewTicker(interval)
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
		case <-every.C:
			if !tick() {
				return
			}
		}
	}
}
