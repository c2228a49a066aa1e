package pool

import "time"

// The end of a failed leader's back-off (leaderFailed) wakes the stores' upstream choice and
// updates Degraded's reason. Its timer is owned: one at a time, stopped when Run returns, and Run
// waits for a callback already started.

// retryAfterLocked arms the back-off's timer for d, replacing the one armed before (mu held).
func (p *Pool) retryAfterLocked(d time.Duration) {
	if p.retryTimer != nil && p.retryTimer.Stop() {
		p.timers.Done() // its callback will not run
	}
	p.retryTimer = nil
	if p.ended {
		return
	}
	p.timers.Add(1)
	fire := func() {
		defer p.timers.Done()
		p.signal()
		p.notifyDegraded()
	}
	if p.afterFunc != nil {
		p.retryTimer = p.afterFunc(d, fire)
	} else {
		p.retryTimer = time.AfterFunc(d, fire)
	}
}

// endTimers stops the back-off's timer once Run's goroutines have ended and waits for a callback
// already started: nothing of the pool runs after Run, nor tells OnDegraded.
func (p *Pool) endTimers() {
	p.mu.Lock()
	p.ended = true
	if p.retryTimer != nil && p.retryTimer.Stop() {
		p.timers.Done()
	}
	p.retryTimer = nil
	p.mu.Unlock()
	p.timers.Wait()
}
