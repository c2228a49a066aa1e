package remote

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// State is a server's health as the balancer sees it.
type State int32

const (
	// Unknown: no probe has answered or failed yet (the hub just started). Nothing proved the
	// server reachable: reads the cache can answer are served from it, other requests may try it.
	Unknown State = iota
	// Healthy: the balancer sends requests to it.
	Healthy
	// Unhealthy: the balancer skips it; it is probed every second until it answers again.
	Unhealthy
)

func (s State) String() string {
	switch s {
	case Healthy:
		return "healthy"
	case Unhealthy:
		return "unhealthy"
	}
	return "unknown"
}

// probeKind is which request a probe sends.
type probeKind int

const (
	heartbeat probeKind = iota // Checker.Probe: the periodic heartbeat (the node lease)
	ping                       // Checker.Ping: one small request
	reach                      // Checker.Reach: is the link alive now (reach.go), a short deadline
)

// timing is the part of a Checker the schedule needs.
type timing struct {
	interval    time.Duration // between heartbeats of a healthy server
	retry       time.Duration // between probes of an unhealthy server, and after a failed heartbeat
	suspectGap  time.Duration // least time between two reaches of a healthy server
	reachFloor  time.Duration // the least deadline of a reach (see reachTimeout)
	timeout     time.Duration // a probe's deadline, and the most a reach's may be
	failedRetry int
	threshold   int
	maxInFlight int
}

// health is a backend's state and its probe schedule. The Checker drives it (start, result), the
// balancer reads it (state) and reports trouble (suspect). Every method that changes it is
// called with mu held; it decides, it never waits, so tests drive it with a synthetic clock.
type health struct {
	state   atomic.Int32
	reached atomic.Bool
	kick    chan struct{} // wakes the checker: a suspicion arrived

	mu          sync.Mutex
	fails, oks  int // consecutive failed / good probes
	lastErr     error
	inflight    int
	seq         uint64        // last probe started
	runFirst    uint64        // first probe of the run of good answers that counts (see result)
	runNext     uint64        // the probe that continues that run
	lastStart   time.Time     // start of the last probe
	nextBeat    time.Time     // when a healthy server's next heartbeat is due
	suspectAt   time.Time     // a request found trouble (zero: none since the last good probe)
	urgent      bool          // that trouble was a failure (refused, reset), not a wait (see backoff)
	started     bool          // the first probe went out
	reaching    bool          // a reach is out (it does not count in inflight)
	lastReach   time.Time     // start of the last reach
	reachUrgent bool          // the reach out was sent for a failed request
	backoff     time.Duration // least gap between reaches for failed requests (see reachBackoffMax)
	linkTime    time.Duration // the slowest recent good ping or reach (see sample)
}

func (h *health) init() {
	h.kick = make(chan struct{}, 1)
}

func (h *health) get() State { return State(h.state.Load()) }

// nextProbe says when the next probe is due and which kind it is. ok is false when none may
// start now whatever the time (a healthy server's probe is still out, or every slot is busy).
func (h *health) nextProbe(t *timing) (at time.Time, kind probeKind, ok bool) {
	if !h.started {
		return time.Time{}, ping, true // at once: the cold start waits on this answer
	}
	switch h.get() {
	case Healthy:
		if !h.suspectAt.IsZero() && !h.reaching {
			// A request is in trouble: is the link alive now? Not after the probes still out,
			// which may wait out their whole timeout on a black-holed link.
			gap := t.suspectGap
			if h.urgent {
				gap = max(gap, h.backoff)
			}
			return later(h.suspectAt, h.lastReach.Add(gap)), reach, true
		}
		if h.inflight > 0 {
			return time.Time{}, 0, false // its answer (or timeout) is what counts
		}
		if h.fails > 0 {
			if at := h.lastStart.Add(t.retry); at.Before(h.nextBeat) {
				return at, ping, true
			}
		}
		return h.nextBeat, heartbeat, true
	default: // Unknown (first probe out) or Unhealthy: a small request every retry
		if h.inflight >= t.maxInFlight {
			return time.Time{}, 0, false
		}
		gap := t.retry
		if h.oks > 0 {
			gap /= 2 // confirm a first good answer sooner
		}
		return h.lastStart.Add(gap), ping, true
	}
}

// start records a probe that goes out now and returns its sequence number.
func (h *health) start(now time.Time, kind probeKind, t *timing) uint64 {
	if kind == reach {
		h.reaching, h.lastReach, h.reachUrgent = true, now, h.urgent
		h.urgent = false
		return h.seq
	}
	h.urgent = false
	h.started = true
	h.inflight++
	h.seq++
	h.lastStart = now
	if kind == heartbeat {
		h.nextBeat = now.Add(t.interval)
	}
	return h.seq
}

// result applies the outcome of probe seq (started at start) and returns the new state when it
// changed.
//
// Probes of an unhealthy server overlap (each waits out its timeout on a black-holed link), so
// answers come out of order. The healthy threshold counts a run of good answers to consecutive
// probes: a late answer to a probe older than the run is ignored, and so is a failure of a probe
// sent before the run began (it went into the link before it came back).
func (h *health) result(seq uint64, started time.Time, kind probeKind, err error, now time.Time, t *timing) (State, bool) {
	if kind == reach {
		return h.reachResult(started, err, now)
	}
	h.inflight--
	prev := h.get()
	next := prev
	if err == nil {
		h.reached.Store(true)
		if kind == ping {
			h.sample(now.Sub(started))
		}
		h.lastErr = nil
		if !h.suspectAt.IsZero() && !started.Before(h.suspectAt) {
			h.suspectAt = time.Time{} // answered after the trouble was seen
		}
		switch {
		case prev == Healthy:
			h.fails = 0
		case prev == Unknown:
			h.runFirst = seq
			next = Healthy
		case h.oks > 0 && seq == h.runNext:
			h.oks++
			h.runNext = seq + 1
		case h.oks == 0 || seq > h.runNext:
			h.oks, h.runFirst, h.runNext = 1, seq, seq+1
		}
		if prev == Unhealthy && h.oks >= t.threshold {
			next = Healthy
		}
	} else {
		if seq < h.runFirst {
			return prev, false
		}
		if prev == Unknown && errors.Is(err, ErrNoCredentials) {
			// Not the server's fault, and no verdict on it: still unknown until the node's
			// credentials are there (a bootstrapping node is served from its cache meanwhile).
			h.lastErr = err
			return prev, false
		}
		h.lastErr = err
		h.oks = 0
		h.fails++
		switch {
		case prev == Unknown:
			next = Unhealthy
		case prev == Healthy && (h.fails >= t.failedRetry || !h.suspectAt.IsZero()):
			// Enough failed heartbeats, or a failed probe while a request was in trouble:
			// never a request alone.
			next = Unhealthy
		}
	}
	if next == prev {
		return prev, false
	}
	return h.turn(next, kind, now)
}

// turn records a change of state.
func (h *health) turn(next State, kind probeKind, now time.Time) (State, bool) {
	h.state.Store(int32(next))
	h.suspectAt, h.urgent = time.Time{}, false
	h.oks, h.backoff = 0, 0
	if next == Healthy {
		h.fails = 0
		if kind != heartbeat {
			h.nextBeat = now // renew the lease at once
		}
	}
	return next, true
}

// suspect records that a request to a healthy server failed or waits too long; it reports whether
// the checker should look (a new suspicion). A reach follows at most every suspectGap; for a
// request that failed (nothing a client can cause at will), at most every backoff once reaches
// answered while requests failed, a gap that starts over after reachBackoffMax without a reach.
func (h *health) suspect(now time.Time, err error) bool {
	if h.get() != Healthy {
		return false
	}
	if !errors.Is(err, ErrNoAnswerYet) && !errors.Is(err, ErrSlow) && !h.urgent {
		h.urgent = true
		if now.Sub(h.lastReach) > reachBackoffMax {
			h.backoff = 0
		}
		if h.suspectAt.IsZero() {
			h.suspectAt = now
		}
		return true
	}
	if !h.suspectAt.IsZero() {
		return false
	}
	h.suspectAt = now
	if h.lastErr == nil {
		h.lastErr = err
	}
	return true
}

// answered records that a request that had waited long enough to be suspected got its answer: the
// link works, so the trouble seen before is over (a reach still out no longer counts).
func (h *health) answered(now time.Time) {
	if h.get() == Healthy && !h.suspectAt.IsZero() && !now.Before(h.suspectAt) {
		h.suspectAt, h.urgent = time.Time{}, false
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
