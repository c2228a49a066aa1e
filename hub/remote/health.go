package remote

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Checker keeps every backend's health by probing it. A server starts Unknown and its first
// probe, sent at once, decides: healthy when it answers, unhealthy when it fails.
//
// A healthy server gets the heartbeat (Probe) every Interval. It turns unhealthy after
// FailedRetry consecutive failed probes (a failed heartbeat is retried every second with a Ping),
// or after one failed probe while a request to it is in trouble (MarkSuspect: it failed to
// connect, or has waited for its answer longer than the Balancer's SuspectAfter). A request alone
// never decides: a suspicion only sends a Reach at once (reach.go: a new connection's handshake
// with a short deadline, not waiting for the probes still out), and a server that answers it
// stays healthy however slow the request itself is; one that does not turns unhealthy then.
//
// An unhealthy server gets a Ping every second (RecoverInterval), without waiting for the ones
// still out on a black-holed link, and turns healthy after HealthyThreshold consecutive good
// ones (a first good answer is confirmed half a second later).
type Checker struct {
	// Probe sends one heartbeat through the backend; nil error means the server answered.
	Probe func(ctx context.Context, b *Backend) error
	// Ping sends one small request through the backend. Default: Backend.Ping (GET /readyz).
	Ping func(ctx context.Context, b *Backend) error
	// Reach asks whether the server's end of the link answers now (reach.go). Default:
	// Backend.Reach.
	Reach func(ctx context.Context, b *Backend) error
	// OnReach, if set, is told each reach's outcome (what telling a black hole from a slow cloud
	// costs).
	OnReach func(b *Backend, err error)
	// Interval between heartbeats of a healthy server. Default 10s.
	Interval time.Duration
	// RecoverInterval between probes of an unhealthy server and after a failed heartbeat.
	// Default 1s (Interval if that is shorter).
	RecoverInterval time.Duration
	// Timeout bounds one probe. Default 2s.
	Timeout time.Duration
	// FailedRetry consecutive failures make a healthy server unhealthy. Default 3.
	FailedRetry int
	// HealthyThreshold consecutive successes make an unhealthy server healthy. Default 2.
	HealthyThreshold int
	// OnChange, if set, is called after every state change (and once per backend at start, with
	// Unknown).
	OnChange func(b *Backend, s State)
	// Log receives one line per state change. Default slog.Default().
	Log *slog.Logger
}

// suspectGap is the least time between two probes of a healthy server that requests keep
// suspecting: at most two small requests a second while a slow cloud keeps requests waiting.
const suspectGap = 500 * time.Millisecond

func (c *Checker) defaults() timing {
	if c.Interval <= 0 {
		c.Interval = 10 * time.Second
	}
	if c.RecoverInterval <= 0 {
		c.RecoverInterval = min(time.Second, c.Interval)
	}
	if c.Timeout <= 0 {
		c.Timeout = 2 * time.Second
	}
	if c.FailedRetry <= 0 {
		c.FailedRetry = 3
	}
	if c.HealthyThreshold <= 0 {
		c.HealthyThreshold = 2
	}
	if c.Ping == nil {
		c.Ping = func(ctx context.Context, b *Backend) error { return b.Ping(ctx) }
	}
	if c.Reach == nil {
		c.Reach = func(ctx context.Context, b *Backend) error { return b.Reach(ctx) }
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return timing{
		interval: c.Interval, retry: c.RecoverInterval, suspectGap: min(suspectGap, c.RecoverInterval),
		reachFloor: min(reachFloor, c.Timeout), timeout: c.Timeout,
		failedRetry: c.FailedRetry, threshold: c.HealthyThreshold,
		// Probes of a black-holed server overlap: each waits out Timeout (a reach is apart).
		maxInFlight: int(c.Timeout/c.RecoverInterval) + 2,
	}
}

// Run probes every backend until ctx ends: one goroutine per configured server, and one per
// probe in flight (at most Timeout/RecoverInterval + 2 per server).
func (c *Checker) Run(ctx context.Context, backends []*Backend) {
	t := c.defaults()
	var wg sync.WaitGroup
	for _, b := range backends {
		if c.OnChange != nil {
			c.OnChange(b, b.State())
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.loop(ctx, b, &t)
		}()
	}
	wg.Wait()
}

type probeResult struct {
	seq     uint64
	started time.Time
	kind    probeKind
	err     error
}

func (c *Checker) loop(ctx context.Context, b *Backend, t *timing) {
	h := &b.health
	results := make(chan probeResult, t.maxInFlight)
	var probes sync.WaitGroup
	defer probes.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		h.mu.Lock()
		now := time.Now()
		var wait time.Duration
		for {
			at, kind, ok := h.nextProbe(t)
			if !ok {
				wait = time.Hour // a result or a suspicion wakes the loop
				break
			}
			if at.After(now) {
				wait = at.Sub(now)
				break
			}
			timeout := c.Timeout
			if kind == reach {
				timeout = h.reachTimeout(t)
			}
			seq := h.start(now, kind, t)
			probes.Add(1)
			go func() {
				defer probes.Done()
				results <- probeResult{seq, now, kind, c.probe(ctx, b, kind, timeout)}
			}()
		}
		h.mu.Unlock()
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-h.kick:
		case r := <-results:
			c.apply(b, r, t)
		}
		timer.Stop()
	}
}

func (c *Checker) probe(ctx context.Context, b *Backend, kind probeKind, timeout time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case kind == reach:
		err := c.Reach(pctx, b)
		if c.OnReach != nil {
			c.OnReach(b, err)
		}
		return err
	case kind == heartbeat && c.Probe != nil:
		return c.Probe(pctx, b)
	}
	return c.Ping(pctx, b)
}

func (c *Checker) apply(b *Backend, r probeResult, t *timing) {
	h := &b.health
	h.mu.Lock()
	s, changed := h.result(r.seq, r.started, r.kind, r.err, time.Now(), t)
	h.mu.Unlock()
	if changed {
		c.change(b, s, r.err)
	}
}

func (c *Checker) change(b *Backend, s State, err error) {
	switch s {
	case Healthy:
		c.Log.Info("cloud server healthy", "server", b.Name)
		b.closeIdleRequests()
	default:
		c.Log.Warn("cloud server unhealthy", "server", b.Name, "err", err)
		b.CloseIdle()
	}
	if c.OnChange != nil {
		c.OnChange(b, s)
	}
}

// MarkSuspect records that a proxied request to the server failed or has waited too long for its
// answer. It does not change the server's health: it asks the checker for a reach at once (at most
// one every half second, reach.go), and a failure of that reach, or of a probe already out, makes
// the server unhealthy.
func (b *Backend) MarkSuspect(err error) {
	h := &b.health
	h.mu.Lock()
	wake := h.suspect(time.Now(), err)
	h.mu.Unlock()
	if wake {
		select {
		case h.kick <- struct{}{}:
		default:
		}
	}
}

// MarkAnswered records that a proxied request the server had been suspected for (it waited longer
// than the Balancer's SuspectAfter) got its response headers: the link works, so a reach still out
// for that trouble no longer decides anything (one lost packet on a slow request's reach does not
// take the hub offline).
func (b *Backend) MarkAnswered() {
	h := &b.health
	h.mu.Lock()
	h.answered(time.Now())
	h.mu.Unlock()
}
