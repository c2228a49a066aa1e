package cache

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// Run runs the cache's own loops until ctx ends: the sync of what was written (Store.RunSync,
// once per interval, and a last time at the end) and the report of what the check at Open found
// corrupt. It returns when both have ended. Close the cache after it returns, when nothing writes
// into it any more.
func (m *Manager) Run(ctx context.Context, interval time.Duration, log *slog.Logger) {
	var wg sync.WaitGroup
	wg.Go(func() {
		if checked, bad := m.Store.Verify(ctx); bad > 0 {
			log.Warn("cache: quarantined corrupt files at start", "checked", checked, "bad", bad)
		}
	})
	m.Store.RunSync(ctx, interval)
	wg.Wait()
}

// Close writes what the writer still holds (until ctx's deadline), syncs and closes the store.
func (m *Manager) Close(ctx context.Context) error {
	werr := m.Writer.Close(ctx)
	return errors.Join(werr, m.Store.Close())
}
