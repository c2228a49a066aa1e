package cache

import (
	"context"
	"sync/atomic"
)

// counters are the store's counters since Open.
type counters struct {
	syncs       atomic.Int64
	written     atomic.Int64 // bytes appended to logs (and discovery files)
	records     atomic.Int64 // records appended (and discovery files)
	compactions atomic.Int64
	compacted   atomic.Int64 // bytes compaction wrote
	corrupt     atomic.Int64 // corrupt records or regions found
}

// Verify reports how many records the logs hold and how many corrupt records or regions were
// found. Every record is checked when the logs are read at Open, so it reads nothing again.
func (s *Store) Verify(ctx context.Context) (checked, bad int) {
	s.eachLog(func(l *rlog) {
		l.mu.RLock()
		for _, sl := range l.objs {
			checked += len(sl.holds)
		}
		l.mu.RUnlock()
	})
	return checked, int(s.corrupt.Load())
}

// Stats are the store's counters since Open.
type Stats struct {
	Syncs int64
	// FilesWritten counts records appended (and discovery files written); BytesWritten their bytes.
	FilesWritten, BytesWritten int64
	// Compactions and CompactedBytes are what compaction rewrote.
	Compactions, CompactedBytes int64
	// Corrupt counts corrupt records and regions found.
	Corrupt int64
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	return Stats{Syncs: s.syncs.Load(), FilesWritten: s.records.Load(), BytesWritten: s.written.Load(),
		Compactions: s.compactions.Load(), CompactedBytes: s.compacted.Load(), Corrupt: s.corrupt.Load()}
}
