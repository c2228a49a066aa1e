package hub

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// StopTimeout bounds a stop: from the moment the hub begins to stop (Run's context ended, or a
// part failed), the servers' in-flight requests, the pool's release of its lease and the cache's
// last writes share this one deadline.
const StopTimeout = 10 * time.Second

// group runs the hub's parts, each one func(ctx) error: the first error stops them all (their
// context ends), and Wait returns once every part has returned. It also holds the one stop
// deadline the parts share (stopContext).
type group struct {
	ctx     context.Context
	cancel  context.CancelFunc
	timeout time.Duration
	wg      sync.WaitGroup

	mu       sync.Mutex
	err      error
	stopping context.Context
	stopped  context.CancelFunc
}

func newGroup(parent context.Context, timeout time.Duration) *group {
	ctx, cancel := context.WithCancel(parent)
	return &group{ctx: ctx, cancel: cancel, timeout: timeout}
}

// Go runs part as the group's part named name. An error it returns before the group stops stops
// the group; once the group is stopping, its context's end is no error.
func (g *group) Go(name string, part func(ctx context.Context) error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		err := part(g.ctx)
		if err == nil || g.ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return
		}
		g.mu.Lock()
		if g.err == nil {
			g.err = fmt.Errorf("hub: %s: %w", name, err)
		}
		g.mu.Unlock()
		g.cancel()
	}()
}

// Wait waits for every part to return and returns the first error.
func (g *group) Wait() error {
	g.wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// stopContext is the stop deadline: a context that ends timeout after the first call once the
// group is stopping (every part calls it as it sees its context end, so within moments of it).
// Before the group stops it is the group's context, which has no deadline.
func (g *group) stopContext() context.Context {
	if g.ctx.Err() == nil {
		return g.ctx
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopping == nil {
		g.stopping, g.stopped = context.WithTimeout(context.WithoutCancel(g.ctx), g.timeout)
	}
	return g.stopping
}

// release frees the group's contexts once Run is done with them.
func (g *group) release() {
	g.cancel()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped != nil {
		g.stopped()
	}
}
