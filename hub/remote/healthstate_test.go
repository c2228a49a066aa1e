package remote

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"testing"
	"time"
)

// The schedule and verdicts, driven by a synthetic clock: a simulated link decides what each probe
// gets and when, and a simulated client may suspect the server. Default flags: heartbeat every
// 10 s, probe timeout 2 s, 3 failures, 2 successes.

var defaultTiming = func() timing {
	c := &Checker{}
	return c.defaults()
}()

const rtt = 20 * time.Millisecond

// link says what a probe started at t gets: how long it takes and its error.
type link func(t time.Duration, kind probeKind) (time.Duration, error)

var errTimeout = errors.New("timeout")

// cuts is a link black-holed during each [from, to): a probe sent into it waits out the 2 s
// timeout, unless the link returns first and resets it (as the e2e relay does).
func cuts(windows ...[2]time.Duration) link {
	return func(t time.Duration, _ probeKind) (time.Duration, error) {
		for _, w := range windows {
			if t >= w[0] && t < w[1] {
				if w[1]-t < 2*time.Second {
					return w[1] - t, errors.New("reset")
				}
				return 2 * time.Second, errTimeout
			}
		}
		return rtt, nil
	}
}

type simProbe struct {
	seq        uint64
	start, end time.Duration
	kind       probeKind
	err        error
}

type change struct {
	at    time.Duration
	state State
}

type sim struct {
	h       health
	t       timing
	link    link
	now     time.Duration
	out     []simProbe
	changes []change
	probes  map[probeKind]int
	suspect func(t time.Duration) bool // a client is waiting on the server at t (checked every 100 ms)
	failed  error                      // what the client's request met (nil: it waits)
}

func newSim(l link) *sim {
	s := &sim{t: defaultTiming, link: l, probes: map[probeKind]int{}}
	s.h.init()
	return s
}

var epoch = time.Unix(1e9, 0)

func (s *sim) at(d time.Duration) time.Time { return epoch.Add(d) }

func (s *sim) run(until time.Duration) {
	step := 100 * time.Millisecond
	for s.now <= until {
		// Start every probe due now.
		for {
			at, kind, ok := s.h.nextProbe(&s.t)
			if !ok || at.After(s.at(s.now)) {
				break
			}
			timeout := s.t.timeout
			if kind == reach {
				timeout = s.h.reachTimeout(&s.t)
			}
			seq := s.h.start(s.at(s.now), kind, &s.t)
			d, err := s.link(s.now, kind)
			if d > timeout {
				d, err = timeout, errTimeout
			}
			s.probes[kind]++
			s.out = append(s.out, simProbe{seq, s.now, s.now + d, kind, err})
		}
		// The next event: a probe's end, a probe due, or the client's next look.
		next := (s.now/step + 1) * step
		for _, p := range s.out {
			next = min(next, p.end)
		}
		if at, _, ok := s.h.nextProbe(&s.t); ok {
			if d := at.Sub(epoch); d > s.now {
				next = min(next, d)
			}
		}
		s.now = next
		sort.Slice(s.out, func(i, j int) bool { return s.out[i].end < s.out[j].end })
		for len(s.out) > 0 && s.out[0].end <= s.now {
			p := s.out[0]
			s.out = s.out[1:]
			if st, ok := s.h.result(p.seq, s.at(p.start), p.kind, p.err, s.at(p.end), &s.t); ok {
				s.changes = append(s.changes, change{p.end, st})
			}
		}
		if s.now%step == 0 && s.suspect != nil && s.suspect(s.now) {
			err := s.failed
			if err == nil {
				err = ErrNoAnswerYet
			}
			s.h.suspect(s.at(s.now), err)
		}
	}
}

// first returns when the state first became st at or after t (-1: never).
func (s *sim) first(st State, after time.Duration) time.Duration {
	for _, c := range s.changes {
		if c.at >= after && c.state == st {
			return c.at
		}
	}
	return -1
}

func TestColdStart(t *testing.T) {
	s := newSim(cuts([2]time.Duration{0, time.Hour}))
	s.run(time.Hour - time.Second)
	if len(s.changes) != 1 || s.changes[0] != (change{2 * time.Second, Unhealthy}) {
		t.Fatalf("black hole at start: %v (want unhealthy when the first probe times out, at 2s)", s.changes)
	}
	// What an hour offline costs: one small request a second.
	if s.probes[heartbeat] != 0 || s.probes[ping] != 3600 {
		t.Fatalf("an hour in a black hole: %v probes (want 3600 pings)", s.probes)
	}
	s = newSim(cuts())
	s.run(time.Second)
	if len(s.changes) == 0 || s.changes[0] != (change{rtt, Healthy}) {
		t.Fatalf("reachable at start: %v (want healthy at the first answer)", s.changes)
	}
	if s.probes[ping] != 1 || s.probes[heartbeat] != 1 {
		t.Fatalf("probes after a healthy start: %v (want one ping, then the heartbeat at once)", s.probes)
	}
}

// Repeated cuts with a client reading all the time (as kubelet and its pods do): each outage is
// noticed within 3 s and each return within 2 s, whatever the phase of the cut against the
// heartbeat and of the return against the probes.
func TestRepeatedCutsNoticedInTime(t *testing.T) {
	for phase := time.Duration(0); phase < 10*time.Second; phase += 350 * time.Millisecond {
		var ws [][2]time.Duration
		for i := 0; i < 5; i++ {
			from := 30*time.Second + time.Duration(i)*(37*time.Second+phase/3) + phase
			ws = append(ws, [2]time.Duration{from, from + 9*time.Second + time.Duration(i)*phase/7})
		}
		s := newSim(cuts(ws...))
		s.suspect = func(d time.Duration) bool { // a request is waiting on the link from the cut on
			for _, w := range ws {
				if d >= w[0] && d < w[1] {
					return true
				}
			}
			return false
		}
		s.run(ws[len(ws)-1][1] + 20*time.Second)
		for i, w := range ws {
			down := s.first(Unhealthy, w[0])
			if down < 0 || down-w[0] > 3*time.Second {
				t.Fatalf("phase %v cycle %d: outage noticed after %v (want ≤ 3s); changes %v", phase, i, down-w[0], s.changes)
			}
			up := s.first(Healthy, w[1])
			if up < 0 || up-w[1] > 2*time.Second {
				t.Fatalf("phase %v cycle %d: return noticed after %v (want ≤ 2s)", phase, i, up-w[1])
			}
			if s.first(Healthy, w[0]) < w[1] {
				t.Fatalf("phase %v cycle %d: healthy during the cut", phase, i)
			}
		}
	}
}

// A link whose black-holed SYNs get through once it returns: probes still out when it comes back
// answer late, and old probes time out after newer ones answered; a stale failure does not undo
// the newer answers.
func TestReturnWithLateAnswers(t *testing.T) {
	from, to := 20*time.Second, 40*time.Second
	l := func(d time.Duration, _ probeKind) (time.Duration, error) {
		if d >= from && d < to {
			if retrans := d + time.Second; retrans >= to && retrans < d+2*time.Second {
				return time.Second + rtt, nil // the retransmitted SYN gets through
			}
			return 2 * time.Second, errTimeout
		}
		return rtt, nil
	}
	for off := time.Duration(0); off < time.Second; off += 50 * time.Millisecond {
		s := newSim(l)
		s.suspect = func(d time.Duration) bool { return d >= from && d < to }
		to = 40*time.Second + off
		s.run(60 * time.Second)
		if up := s.first(Healthy, to); up < 0 || up-to > 2*time.Second {
			t.Fatalf("return at +%v noticed after %v; changes %v", off, up-to, s.changes)
		}
	}
}

// Without any client, the heartbeat alone notices an outage after FailedRetry failed probes
// (the failed heartbeat retried every second), and a single failed heartbeat changes nothing.
func TestIdleOutageNeedsFailedRetry(t *testing.T) {
	s := newSim(cuts([2]time.Duration{25 * time.Second, time.Hour}))
	s.run(60 * time.Second)
	// Heartbeats at 0.02 (after the ping), 10.02, 20.02, 30.02: that one fails at 32.02; the
	// retries go at once (a second after the failed one started) and fail at 34.02 and 36.02.
	if down := s.first(Unhealthy, 0); down < 35*time.Second || down > 37*time.Second {
		t.Fatalf("idle outage noticed at %v; changes %v", down, s.changes)
	}
	s = newSim(func(d time.Duration, kind probeKind) (time.Duration, error) {
		if kind == heartbeat && d > 15*time.Second && d < 25*time.Second {
			return rtt, errors.New("one lost heartbeat")
		}
		return rtt, nil
	})
	s.run(60 * time.Second)
	if len(s.changes) != 1 {
		t.Fatalf("one failed heartbeat changed the state: %v", s.changes)
	}
}

// A client kept waiting by a slow answer (a pod's list, a server that is only slow for it) never
// makes a server that answers its probes unhealthy, and costs at most two small requests a second.
func TestSlowRequestsDoNotDecide(t *testing.T) {
	s := newSim(cuts())
	s.suspect = func(time.Duration) bool { return true }
	s.run(60 * time.Second)
	if len(s.changes) != 1 || s.changes[0].state != Healthy {
		t.Fatalf("changes %v", s.changes)
	}
	if n := s.probes[ping]; n > 2*60+1 {
		t.Fatalf("%d pings in 60 s of suspicion", n)
	}
}

// A flapping link (every other probe lost) does not turn an unhealthy server healthy: the
// threshold counts consecutive answers.
func TestHealthyThresholdConsecutive(t *testing.T) {
	var n int
	s := newSim(func(d time.Duration, _ probeKind) (time.Duration, error) {
		n++
		if d < 5*time.Second || n%2 == 0 {
			return 2 * time.Second, errTimeout
		}
		return rtt, nil
	})
	s.run(30 * time.Second)
	if len(s.changes) != 1 || s.changes[0].state != Unhealthy {
		t.Fatalf("flapping link: %v", s.changes)
	}
	// One probe a second, and one more half a second after each good answer.
	if total := s.probes[ping] + s.probes[heartbeat]; total > 2*30 {
		t.Fatalf("%d probes in 30 s unhealthy", total)
	}
}

// The real loop with fake probes: the same verdicts on a real clock, with short intervals.
func TestCheckerLoop(t *testing.T) {
	var down atomic.Bool
	var pings, beats atomic.Int32
	fake := func(n *atomic.Int32) func(ctx context.Context, b *Backend) error {
		return func(ctx context.Context, b *Backend) error {
			n.Add(1)
			if down.Load() {
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}
	}
	b := backend(t, "http://127.0.0.1:1")
	changes := make(chan State, 10)
	// The heartbeat interval is an hour: the one heartbeat is the one sent on turning healthy,
	// however long a loaded machine takes between the checks below.
	c := &Checker{Probe: fake(&beats), Ping: fake(&pings), Interval: time.Hour, RecoverInterval: 20 * time.Millisecond,
		Timeout: 40 * time.Millisecond, OnChange: func(_ *Backend, s State) { changes <- s }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx, []*Backend{b})
	expect := func(want State, within time.Duration) {
		t.Helper()
		select {
		case s := <-changes:
			if s != want {
				t.Fatalf("state %v, want %v", s, want)
			}
		case <-time.After(within):
			t.Fatalf("no change to %v within %v", want, within)
		}
	}
	expect(Unknown, 30*time.Second)
	expect(Healthy, 30*time.Second)
	if !b.Reached() {
		t.Fatal("not reached after a good probe")
	}
	// Turning healthy sends the heartbeat at once (on its own goroutine), and no other.
	for deadline := time.Now().Add(30 * time.Second); beats.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if beats.Load() != 1 {
		t.Fatalf("%d heartbeats right after turning healthy, want 1", beats.Load())
	}
	down.Store(true)
	b.MarkSuspect(ErrNoAnswerYet)
	expect(Unhealthy, 30*time.Second)
	if b.LastError() == nil {
		t.Fatal("no last error")
	}
	down.Store(false)
	expect(Healthy, 30*time.Second)
	cancel()
}

func (c change) String() string { return fmt.Sprintf("%v@%v", c.state, c.at) }

// A node still bootstrapping its certificate has no verdict on the server: it stays unknown, and
// turns healthy at the first answer once the certificate is there.
func TestNoCredentialsIsNoVerdict(t *testing.T) {
	s := newSim(func(d time.Duration, _ probeKind) (time.Duration, error) {
		if d < 3*time.Second {
			return 0, ErrNoCredentials
		}
		return rtt, nil
	})
	s.run(10 * time.Second)
	if len(s.changes) != 1 || s.changes[0] != (change{3*time.Second + rtt, Healthy}) {
		t.Fatalf("bootstrapping node: %v (want healthy at the first answer after 3 s)", s.changes)
	}
}

// A request that waits asks for a reach at once, and for another at most every half second; one
// that failed (refused, reset: nothing a client causes at will) gets it at once, even right after
// another reach.
func TestFailedRequestProbesAtOnce(t *testing.T) {
	var h health
	h.init()
	tm := defaultTiming
	now := epoch
	seq := h.start(now, ping, &tm)
	h.result(seq, now, ping, nil, now.Add(rtt), &tm)
	now = now.Add(100 * time.Millisecond)
	if !h.suspect(now, ErrNoAnswerYet) {
		t.Fatal("first suspicion ignored")
	}
	if at, kind, ok := h.nextProbe(&tm); !ok || kind != reach || !at.Equal(now) {
		t.Fatalf("a waiting request: %v at %v (want a reach at once, %v)", kind, at.Sub(epoch), now.Sub(epoch))
	}
	h.start(now, reach, &tm)
	h.result(0, now, reach, nil, now.Add(rtt), &tm)
	now = now.Add(100 * time.Millisecond)
	if !h.suspect(now, ErrNoAnswerYet) {
		t.Fatal("a suspicion after the answered reach ignored")
	}
	if at, kind, ok := h.nextProbe(&tm); !ok || kind != reach || !at.Equal(epoch.Add(100*time.Millisecond+tm.suspectGap)) {
		t.Fatalf("a waiting request: %v at %v (want a reach half a second after the last)", kind, at.Sub(epoch))
	}
	if h.suspect(now, ErrNoAnswerYet) {
		t.Fatal("a second waiting request woke the checker again")
	}
	if !h.suspect(now, errors.New("connection refused")) {
		t.Fatal("a failed request did not wake the checker")
	}
	if at, _, ok := h.nextProbe(&tm); !ok || !at.Equal(epoch.Add(100*time.Millisecond+tm.suspectGap)) {
		t.Fatalf("a failed request: probe at %v (want half a second after the last)", at.Sub(epoch))
	}
	h.start(now, reach, &tm)
	if st, ok := h.result(0, now, reach, errors.New("connection refused"), now, &tm); !ok || st != Unhealthy {
		t.Fatalf("reach failed after a failed request: %v %v (want unhealthy)", st, ok)
	}
}
