package cache

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultQueueBytes bounds what all writer queues hold together.
const DefaultQueueBytes = 16 << 20

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

	queued atomic.Int64
	mu     sync.Mutex
	queues map[Resource]*queue
	closed bool
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
	r       Resource
	mu      sync.Mutex
	ops     []op
	running bool
	dropped bool
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
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		w.queued.Add(-n)
		return false
	}
	q := w.queues[r]
	if q == nil {
		q = &queue{r: r}
		w.queues[r] = q
	}
	w.mu.Unlock()

	q.mu.Lock()
	q.ops = append(q.ops, o)
	start := !q.running
	q.running = true
	q.mu.Unlock()
	if start {
		go w.run(q)
	}
	return true
}

// markDropped records that a queue lost data; its goroutine marks the lists on disk.
func (w *Writer) markDropped(r Resource) {
	w.mu.Lock()
	q := w.queues[r]
	w.mu.Unlock()
	if q != nil {
		q.mu.Lock()
		q.dropped = true
		q.mu.Unlock()
	}
	if w.OnDrop != nil {
		w.OnDrop(r)
	}
}

// run drains one queue, a batch at a time: everything queued while the previous batch was written
// is parsed together, so repeated writes of one key coalesce to the latest.
func (w *Writer) run(q *queue) {
	b := newBatch(w, q.r)
	for {
		q.mu.Lock()
		ops, dropped := q.ops, q.dropped
		q.ops, q.dropped = nil, false
		if len(ops) == 0 && !dropped {
			q.running = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		if dropped {
			w.fail(q.r, w.store.MarkIncomplete(q.r))
		}
		for _, o := range ops {
			b.apply(o)
			w.queued.Add(-int64(len(o.data)))
		}
		b.flush()
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

func (w *Writer) idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, q := range w.queues {
		q.mu.Lock()
		busy := q.running
		q.mu.Unlock()
		if busy {
			return false
		}
	}
	return true
}

// Close stops taking new data and waits for the queues to drain.
func (w *Writer) Close(ctx context.Context) error {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	return w.Flush(ctx)
}
