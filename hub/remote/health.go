package remote

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// Checker keeps every backend's health by a periodic heartbeat, as YurtHub does: a server turns
// unhealthy after FailedRetry consecutive failed heartbeats, or at once when a proxied request to
// it fails (MarkSuspect); it turns healthy again after HealthyThreshold consecutive successes.
// A suspect server is probed again at once instead of at the next interval.
type Checker struct {
	// Probe sends one heartbeat through the backend; nil error means the server answered.
	Probe func(ctx context.Context, b *Backend) error
	// Interval between heartbeats of one server. Default 10s.
	Interval time.Duration
	// Timeout bounds one heartbeat. Default 2s.
	Timeout time.Duration
	// FailedRetry consecutive failures make a healthy server unhealthy. Default 3.
	FailedRetry int
	// HealthyThreshold consecutive successes make an unhealthy server healthy. Default 2.
	HealthyThreshold int
	// OnChange, if set, is called after every health change (and once per backend at start).
	OnChange func(b *Backend, healthy bool)
	// Log receives one line per state change. Default slog.Default().
	Log *slog.Logger
}

func (c *Checker) defaults() {
	if c.Interval <= 0 {
		c.Interval = 10 * time.Second
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
	if c.Log == nil {
		c.Log = slog.Default()
	}
}

// Run heartbeats every backend until ctx ends: one goroutine per configured server.
func (c *Checker) Run(ctx context.Context, backends []*Backend) {
	c.defaults()
	var wg sync.WaitGroup
	for _, b := range backends {
		b.health.mu.Lock()
		b.health.onChange = c.change
		b.health.mu.Unlock()
		if c.OnChange != nil {
			c.OnChange(b, b.Healthy())
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.loop(ctx, b)
		}()
	}
	wg.Wait()
}

func (c *Checker) loop(ctx context.Context, b *Backend) {
	t := time.NewTimer(0) // first heartbeat at once
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-b.health.kick:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
		pctx, cancel := context.WithTimeout(ctx, c.Timeout)
		err := c.Probe(pctx, b)
		cancel()
		if ctx.Err() != nil {
			return
		}
		c.report(b, err)
		if errors.Is(err, ErrNoCredentials) {
			// The node cannot reach the cloud without credentials (served from the cache
			// meanwhile); the check costs no traffic, so look again soon: the server turns
			// healthy within HealthyThreshold seconds of a bootstrapped or renewed certificate.
			t.Reset(min(time.Second, c.Interval))
			continue
		}
		t.Reset(c.Interval)
	}
}

func (c *Checker) report(b *Backend, err error) {
	h := &b.health
	h.mu.Lock()
	h.lastErr = err
	changed := false
	if err == nil {
		h.reached.Store(true)
		h.fails = 0
		h.oks++
		if !h.healthy.Load() && h.oks >= c.HealthyThreshold {
			h.healthy.Store(true)
			changed = true
		}
	} else {
		h.oks = 0
		h.fails++
		if h.healthy.Load() && h.fails >= c.FailedRetry {
			h.healthy.Store(false)
			changed = true
		}
	}
	healthy := h.healthy.Load()
	h.mu.Unlock()
	if changed {
		c.change(b, healthy, err)
	}
}

func (c *Checker) change(b *Backend, healthy bool, err error) {
	if healthy {
		c.Log.Info("cloud server healthy", "server", b.Name)
	} else {
		c.Log.Warn("cloud server unhealthy", "server", b.Name, "err", err)
		b.CloseIdle()
	}
	if c.OnChange != nil {
		c.OnChange(b, healthy)
	}
}

// MarkSuspect records that a proxied request to the server failed: a healthy server turns
// unhealthy at once and is probed again without waiting for the next interval.
func (b *Backend) MarkSuspect(err error) {
	h := &b.health
	h.mu.Lock()
	h.lastErr = err
	h.oks = 0
	changed := h.healthy.CompareAndSwap(true, false)
	onChange := h.onChange
	h.mu.Unlock()
	if changed && onChange != nil {
		onChange(b, false, err)
	}
	select {
	case h.kick <- struct{}{}:
	default:
	}
}
