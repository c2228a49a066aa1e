package cache

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// Rate is a token bucket of bytes: Burst at once, refilled at PerMinute. A Burst of 0 is no bound.
type Rate struct{ Burst, PerMinute int64 }

// WriteBudget bounds the bytes offline changes (Header.Local) write to flash, per minute: the quotas
// (quota.go) bound the space they take, not how often it is rewritten, and one pod re-creating a
// 2.9 MB event wrote 686 MiB in 30 s. An offline change is charged the bytes of its record as
// stored (compressed); an unchanged one writes nothing and is charged nothing.
type WriteBudget struct {
	// Node is each owner with the node's identity (kubelet, kube-proxy, …): generous, so the node
	// never meets it (kubelet re-running every pod offline after a reboot writes a few MiB), yet a
	// runaway node component cannot write more than Node.PerMinute for ever.
	Node Rate
	// Nodes is all the node's owners together: an owner is a client's User-Agent, so a node
	// client that changes it every request would otherwise get a full bucket each time.
	Nodes Rate
	// Foreign is each owner with a credential of its own (component@credential: pods); Foreigners
	// is all of them together, so made-up owners do not multiply it. A change larger than either
	// Burst never fits: it is refused with ErrFull.
	Foreign, Foreigners Rate
	// MaxOwners bounds the owners whose buckets are kept (default 1024): past it the fullest goes
	// (a full bucket is what a new owner gets anyway; Foreigners bounds the others together).
	MaxOwners int
	// Now is the clock (tests); nil: the Store's.
	Now func() time.Time
}

// DefaultWriteBudget: the node's owners 32 MiB at once and 8 MiB a minute each, 64 MiB and 16 MiB a
// minute together; every other owner
// 256 KiB at once and 256 KiB a minute, and all of them together 512 KiB and 1 MiB a minute. So
// the owners that are not the node's append at most 1.5 MiB in any minute and 1 MiB a minute over
// time (compaction adds at most a third: ≤ 2 MiB of flash a minute), while a pod's offline events of
// a few hundred bytes each (a thousand a minute) never meet it.
func DefaultWriteBudget() WriteBudget {
	return WriteBudget{
		Node:       Rate{Burst: 32 << 20, PerMinute: 8 << 20},
		Nodes:      Rate{Burst: 64 << 20, PerMinute: 16 << 20},
		Foreign:    Rate{Burst: 256 << 10, PerMinute: 256 << 10},
		Foreigners: Rate{Burst: 512 << 10, PerMinute: 1 << 20},
	}
}

// BudgetError is an offline change past its owner's write budget (or that of every owner that is
// not the node's together); it fits after RetryAfter.
type BudgetError struct {
	Owner      string
	Bytes      int64
	RetryAfter time.Duration
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("cache: offline change of %d bytes by %s is past its budget of bytes written a minute; it fits in %v",
		e.Bytes, e.Owner, e.RetryAfter.Round(time.Second))
}

// RetryAfterSeconds is RetryAfter in whole seconds, rounded up, at least 1.
func (e *BudgetError) RetryAfterSeconds() int {
	return max(1, int(math.Ceil(e.RetryAfter.Seconds())))
}

// SetWriteBudget replaces the write budget (DefaultWriteBudget until then); the buckets start full.
func (s *Store) SetWriteBudget(b WriteBudget) {
	s.budget.mu.Lock()
	defer s.budget.mu.Unlock()
	s.budget.cfg = &b
	s.budget.owners = nil
	s.budget.foreign = bucket{}
	s.budget.nodes = bucket{}
}

// bucket is a token bucket's level, in bytes, at a time.
type bucket struct {
	level float64
	at    time.Time
	set   bool
}

// refill brings the level up to now.
func (b *bucket) refill(r Rate, now time.Time) {
	if !b.set {
		*b = bucket{level: float64(r.Burst), at: now, set: true}
		return
	}
	if dt := now.Sub(b.at); dt > 0 {
		b.level = min(float64(r.Burst), b.level+float64(r.PerMinute)*dt.Minutes())
		b.at = now
	}
}

// wait is how long until the bucket holds n bytes (0: it does now).
func (b *bucket) wait(r Rate, n int64) time.Duration {
	short := float64(n) - b.level
	if r.Burst <= 0 || short <= 0 {
		return 0
	}
	if r.PerMinute <= 0 {
		return time.Hour
	}
	return time.Duration(short / float64(r.PerMinute) * float64(time.Minute))
}

// budget is a Store's write budget: a bucket per owner (at most MaxOwners) and one for the owners
// that are not the node's together. It takes no other lock.
type budget struct {
	mu      sync.Mutex
	cfg     *WriteBudget
	owners  map[string]*bucket
	foreign bucket
	nodes   bucket // the node's owners together
}

// class returns the rate of all the owners of owner's kind together, and their bucket.
func (b *budget) class(foreign bool) (Rate, *bucket) {
	if foreign {
		return b.config().Foreigners, &b.foreign
	}
	return b.config().Nodes, &b.nodes
}

// take charges an owner's offline change of n bytes to its buckets, or says why it may not be
// written: a *BudgetError (it fits later), or ErrFull (it never fits).
func (b *budget) take(owner string, n int64, now time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	cfg := b.config()
	own, foreign := cfg.Node, Foreign(owner)
	if foreign {
		own = cfg.Foreign
	}
	if own.Burst > 0 && n > own.Burst {
		return tooLarge(owner, n, own.Burst)
	}
	all, allBucket := b.class(foreign)
	if all.Burst > 0 && n > all.Burst {
		return tooLarge(owner, n, all.Burst)
	}
	if cfg.Now != nil {
		now = cfg.Now()
	}
	ob := b.bucketOf(owner, now, cfg.MaxOwners)
	ob.refill(own, now)
	wait := ob.wait(own, n)
	allBucket.refill(all, now)
	wait = max(wait, allBucket.wait(all, n))
	if wait > 0 {
		return &BudgetError{Owner: owner, Bytes: n, RetryAfter: wait}
	}
	b.charge(owner, foreign, float64(n))
	return nil
}

func tooLarge(owner string, n, burst int64) error {
	return fmt.Errorf("cache: offline change of %d bytes by %s is larger than its budget of %d bytes written at once: %w", n, owner, burst, ErrFull)
}

// refund gives back what take charged for a change that was not written.
func (b *budget) refund(owner string, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.charge(owner, Foreign(owner), -float64(n))
}

// charge moves the levels of an owner's buckets by n bytes (a refund never overfills them).
func (b *budget) charge(owner string, foreign bool, n float64) {
	cfg := b.config()
	own := cfg.Node
	if foreign {
		own = cfg.Foreign
	}
	all, allBucket := b.class(foreign)
	allBucket.level = min(allBucket.level-n, float64(all.Burst))
	if ob := b.owners[owner]; ob != nil {
		ob.level = min(ob.level-n, float64(own.Burst))
	}
}

func (b *budget) config() *WriteBudget {
	if b.cfg == nil {
		d := DefaultWriteBudget()
		b.cfg = &d
	}
	return b.cfg
}

// bucketOf returns an owner's bucket, making room for it past max owners by dropping the fullest.
func (b *budget) bucketOf(owner string, now time.Time, max int) *bucket {
	if ob := b.owners[owner]; ob != nil {
		return ob
	}
	if max <= 0 {
		max = 1024
	}
	if b.owners == nil {
		b.owners = map[string]*bucket{}
	}
	if len(b.owners) >= max {
		b.dropFullest(now)
	}
	ob := &bucket{}
	b.owners[owner] = ob
	return ob
}

// dropFullest forgets the bucket nearest to full (as a share of its burst).
func (b *budget) dropFullest(now time.Time) {
	cfg := b.config()
	victim, best := "", -math.MaxFloat64
	for name, ob := range b.owners {
		r := cfg.Node
		if Foreign(name) {
			r = cfg.Foreign
		}
		ob.refill(r, now)
		share := 1.0
		if r.Burst > 0 {
			share = ob.level / float64(r.Burst)
		}
		if share > best {
			victim, best = name, share
		}
	}
	delete(b.owners, victim)
}

// admit lets an owner's offline change of need bytes be written: within its write budget (charged
// here) and its quota (makeRoom). Callers hold l.mu.
func (l *rlog) admit(owner int32, k Key, need int64) error {
	now := time.Now()
	if l.s.clock != nil {
		now = l.s.clock()
	}
	if err := l.s.budget.take(k.Owner, need, now); err != nil {
		return err
	}
	if err := l.makeRoom(owner, k, need); err != nil {
		l.s.budget.refund(k.Owner, need)
		return err
	}
	return nil
}
