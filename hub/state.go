package hub

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"nodehub/hub/remote"
)

// cloudState is whether the cloud is reachable: the one source every part of the hub asks (the
// pipeline's steps, the offline proxy, GC, OTA, the pool, readiness), never the servers' health
// itself. It follows the health checker's verdicts on the servers (update: online while one is
// healthy), and holds what waits on it: offline watches end when it turns online, and proxied
// requests are cancelled when it turns offline (so their clients come back and land on the local
// proxy instead of hanging on a dead link).
//
// It starts Unknown: until the first probe answers, nothing proved the cloud reachable, and reads
// the cache can answer do not wait on it for more than coldWait (a hub started on a black-holed
// link answers from its cache at once instead of after the probe's timeout).
type cloudState struct {
	servers *remote.Balancer // whose verdicts it follows

	mu      sync.Mutex
	state   remote.State
	changed chan struct{}
	period  context.Context // cancelled when the cloud turns offline
	cancel  context.CancelFunc
	coldEnd time.Time // reads stop waiting for the first verdict then
	// returned is closed a random moment within returnSpread after the cloud turned reachable:
	// the hub's own list-watch loops (pool stores, election, topology) end their back-off then.
	returned chan struct{}
	since    time.Time // when it last turned Healthy
}

// returnSpread is the window over which a hub spreads its first requests after the cloud came
// back: 5,000 gateways whose link returns at once reach the apiservers over 2 s, not in one
// instant, and no loop waits out a back-off left over from the outage.
const returnSpread = 2 * time.Second

// coldWait is how long after start a read the cache can answer waits for the first probe's
// verdict: long enough for a reachable cloud's first answer on a good link (then the read goes to
// it), short enough that a node restarted on a dead link gets its cached answers at once.
const coldWait = 50 * time.Millisecond

func newCloudState(servers *remote.Balancer) *cloudState {
	s := &cloudState{servers: servers, state: remote.Unknown, changed: make(chan struct{}), coldEnd: time.Now().Add(coldWait), returned: make(chan struct{})}
	s.period, s.cancel = context.WithCancel(context.Background())
	return s
}

// begin restarts the cold-start wait: the checker starts probing now.
func (s *cloudState) begin(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.coldEnd = now.Add(coldWait)
}

// Online reports whether the cloud is known to be reachable.
func (s *cloudState) Online() bool { return s.Current() == remote.Healthy }

// unreachable reports whether the cloud is known to be unreachable (a verdict: not merely none yet).
func (s *cloudState) unreachable() bool { return s.Current() == remote.Unhealthy }

// answeredOnce reports whether some server answered a probe once since the start.
func (s *cloudState) answeredOnce() bool {
	for _, b := range s.servers.Backends {
		if b.Reached() {
			return true
		}
	}
	return false
}

// update follows a change of a server's health (remote.Checker.OnChange): the cloud is reachable
// while some server is healthy, unknown while none is but one has no verdict yet, else not. It
// reports whether that changed.
func (s *cloudState) update() bool { return s.set(s.servers.State()) }

// Current is Healthy (online), Unhealthy (offline) or Unknown (no verdict yet).
func (s *cloudState) Current() remote.State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// Changed returns a channel closed at the next change.
func (s *cloudState) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Returned returns a channel closed (within returnSpread, at random) after the cloud next turns
// reachable.
func (s *cloudState) Returned() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.returned
}

// OnlineSince is when the cloud last turned reachable (zero before it ever did).
func (s *cloudState) OnlineSince() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.since
}

// OnlinePeriod returns a context that ends when the cloud next turns offline.
func (s *cloudState) OnlinePeriod() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.period
}

// Settle waits, while the state is Unknown, until it changes or the cold-start wait ends (or ctx
// does), and returns the state then.
func (s *cloudState) Settle(ctx context.Context) remote.State {
	s.mu.Lock()
	st, ch, left := s.state, s.changed, time.Until(s.coldEnd)
	s.mu.Unlock()
	if st != remote.Unknown || left <= 0 {
		return st
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
	}
	return s.Current()
}

// verdict waits, while the state is Unknown, until the first probe's verdict (or ctx ends), and
// returns the state then.
func (s *cloudState) verdict(ctx context.Context) remote.State {
	for {
		s.mu.Lock()
		st, ch := s.state, s.changed
		s.mu.Unlock()
		if st != remote.Unknown {
			return st
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return st
		}
	}
}

// set records the state; it reports whether it changed.
func (s *cloudState) set(st remote.State) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st == s.state {
		return false
	}
	if st == remote.Unhealthy {
		s.cancel()
	} else if s.state == remote.Unhealthy {
		s.period, s.cancel = context.WithCancel(context.Background())
	}
	if st == remote.Healthy {
		s.since = time.Now()
		ch := s.returned
		s.returned = make(chan struct{})
		time.AfterFunc(rand.N(returnSpread), func() { close(ch) })
	}
	s.state = st
	close(s.changed)
	s.changed = make(chan struct{})
	return true
}
