package cache

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultQueueBytes bounds what all writer queues hold together.
const DefaultQueueBytes = 4 << 20

// maxPendingBytes is how much parsed, not yet written data one queue holds before it writes
// without waiting for Delay (a large list is written as it streams, not held whole; the log is
// only appended to, so writing it in 256 KiB pieces costs the flash nothing more).
const maxPendingBytes = 256 << 10

// Writer takes what responses tee into the cache and applies it to the Store off the clients'
// path: one queue per resource and, while it has work, one goroutine writing it, so resources
// never wait on each other and nothing waits on a lock held across disk I/O. Enqueueing never
// blocks: past the byte budget the data is dropped, the response's stream is abandoned and the
// resource's lists are marked incomplete.
type Writer struct {
	store  *Store
	budget int64
	log    *slog.Logger
	// OnDrop, if set, is called (from the client's goroutine) for every chunk dropped.
	OnDrop func(r Resource)
	// OnError, if set, is called for every failed store operation.
	OnError func(r Resource, err error)
	// MaxBytes, when set, stops the caching of new objects once the cache's files take that
	// much; objects already cached keep being updated, and the resource's lists are marked
	// incomplete. OnFull is told about every object not cached for it.
	MaxBytes int64
	OnFull   func(r Resource)
	// Delay is how long a changed object may wait in memory before it is written, so that
	// repeated changes of one key (an EndpointSlice churning several times a second) cost one
	// write. Zero writes at once. The hub sets it to the sync interval: durability is batched to
	// that interval anyway.
	Delay time.Duration

	queued  atomic.Int64
	closing atomic.Bool // closed is set (read without the lock)
	mu      sync.Mutex
	queues  map[Resource]*queue
	closed  bool
}

// NewWriter returns a writer onto store with a total queue budget in bytes.
func NewWriter(store *Store, budget int64, log *slog.Logger) *Writer {
	if budget <= 0 {
		budget = DefaultQueueBytes
	}
	if log == nil {
		log = slog.Default()
	}
	return &Writer{store: store, budget: budget, log: log, queues: map[Resource]*queue{}}
}

type queue struct {
	r Resource
	// b is the queue's pending writes. It lives as long as the queue: the splitters of open
	// streams hand their objects to it whichever goroutine drains the queue next.
	b       *batch
	mu      sync.Mutex
	ops     []op
	running bool
	dropped bool
	// gone is set once the idle queue has left the writer's map (queues keyed by owner must not
	// pile up: every pod with a token of its own is an owner); an enqueue that finds it looks again.
	gone bool
	kick chan struct{} // wakes a goroutine waiting out Delay when new ops arrive
}

type op struct {
	st   *Stream
	data []byte
	end  bool
	ok   bool // with end: the response ended normally
}

// Queued returns the bytes waiting in all queues.
func (w *Writer) Queued() int64 { return w.queued.Load() }

// enqueue adds an op to its resource's queue and starts the queue's goroutine if idle. It reports
// false when the budget is exhausted (the op is dropped).
func (w *Writer) enqueue(r Resource, o op) bool {
	n := int64(len(o.data))
	if n > 0 && w.queued.Add(n) > w.budget {
		w.queued.Add(-n)
		return false
	}
	for {
		var q *queue
		if o.st != nil && !w.closing.Load() {
			q = o.st.q.Load()
		}
		if q == nil {
			if q = w.queue(r); q == nil {
				w.queued.Add(-n)
				return false
			}
			if o.st != nil {
				o.st.q.Store(q)
			}
		}
		q.mu.Lock()
		if q.gone {
			q.mu.Unlock()
			if o.st != nil {
				o.st.q.CompareAndSwap(q, nil)
			}
			continue
		}
		q.ops = append(q.ops, o)
		start := !q.running
		q.running = true
		q.mu.Unlock()
		if start {
			go w.run(q)
		} else {
			select {
			case q.kick <- struct{}{}:
			default:
			}
		}
		return true
	}
}

// queue returns r's queue, made if there is none; nil once the writer is closed.
func (w *Writer) queue(r Resource) *queue {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	q := w.queues[r]
	if q == nil {
		q = &queue{r: r, kick: make(chan struct{}, 1)}
		q.b = newBatch(w, r)
		w.queues[r] = q
	}
	return q
}

// retire removes an idle queue from the map: nothing queued, pending or remembered (a batch that
// skipped objects for --cache-max-bytes keeps its queue, so a list still streaming is not
// recorded complete by a new batch). The goroutine has ended when it is called.
func (w *Writer) retire(q *queue) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	b := q.b
	if q.running || len(q.ops) > 0 || q.dropped || len(b.order) > 0 || len(b.bookmarks) > 0 || b.full || w.queues[q.r] != q {
		return
	}
	q.gone = true
	delete(w.queues, q.r)
}

// Queues returns how many resource queues the writer holds (idle ones are retired).
func (w *Writer) Queues() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queues)
}

// markDropped records that a queue lost data; its goroutine marks the lists on disk.
func (w *Writer) markDropped(r Resource) {
	for q := w.queue(r); q != nil; q = w.queue(r) {
		q.mu.Lock()
		if q.gone {
			q.mu.Unlock()
			continue
		}
		q.dropped = true
		start := !q.running
		q.running = true
		q.mu.Unlock()
		if start { // a retired queue's mark must still reach the disk
			go w.run(q)
		}
		break
	}
	if w.OnDrop != nil {
		w.OnDrop(r)
	}
}

// run drains one queue: it parses what was queued into pending objects, coalesced by key, and
// writes them once Delay has passed since the first of them changed (at once past
// maxPendingBytes). It ends when nothing is queued or pending.
func (w *Writer) run(q *queue) {
	b := q.b
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		q.mu.Lock()
		ops, dropped := q.ops, q.dropped
		q.ops, q.dropped = nil, false
		if len(ops) == 0 && !dropped {
			if len(b.order) == 0 && len(b.bookmarks) == 0 {
				q.running = false
				q.mu.Unlock()
				w.retire(q)
				return
			}
			q.mu.Unlock()
			wait := time.Until(b.due)
			if wait <= 0 || w.isClosed() {
				b.flush()
				continue
			}
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-q.kick:
			case <-timer.C:
			}
			continue
		}
		q.mu.Unlock()
		if dropped {
			w.fail(q.r, w.store.MarkIncomplete(q.r))
		}
		for i, o := range ops {
			b.apply(o)
			w.queued.Add(-int64(len(o.data)))
			ops[i] = op{} // let the chunk go
			if b.pendingBytes > maxPendingBytes {
				b.flush() // a large list is written as it streams, not held whole
			}
		}
		if w.Delay <= 0 || !b.due.IsZero() && !time.Now().Before(b.due) || w.isClosed() {
			b.flush()
		}
	}
}

func (w *Writer) fail(r Resource, err error) {
	if err == nil {
		return
	}
	if w.OnError != nil {
		w.OnError(r, err)
	}
	w.log.Debug("cache: write failed", "resource", r.String(), "err", err)
}

// Flush waits until every queue is empty and written (or ctx ends).
func (w *Writer) Flush(ctx context.Context) error {
	for {
		if w.idle() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (w *Writer) idle() bool { return w.Busy() == 0 }

// Busy returns how many queues have work not yet written (queued, or pending until Delay has
// passed). Zero means everything teed so far is in the store's files.
func (w *Writer) Busy() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, q := range w.queues {
		q.mu.Lock()
		if q.running {
			n++
		}
		q.mu.Unlock()
	}
	return n
}

// Close stops taking new data, writes what waits (without waiting out Delay) and returns when
// everything is on disk or ctx ends.
func (w *Writer) Close(ctx context.Context) error {
	w.mu.Lock()
	w.closed = true
	w.closing.Store(true)
	for _, q := range w.queues {
		select {
		case q.kick <- struct{}{}:
		default:
		}
	}
	w.mu.Unlock()
	return w.Flush(ctx)
}

func (w *Writer) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}
