package cache

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"sync/atomic"
	"time"

	"nodehub/durable"
)

// pending is what the next Sync makes durable: the logs appended to note it themselves
// (logFile.unsynced); the directories whose entries changed (a log created) are noted here.
type pending struct {
	dirty   atomic.Bool
	dirtied chan struct{} // RunSync's wake-up: something was written since the last sync

	smu          sync.Mutex // directories to fsync at the next Sync
	unsyncedDirs map[string]bool
}

// Sync makes everything written so far durable, if anything was written: one fdatasync(2) per log
// appended to since the last sync and an fsync of the directories whose entries changed (a log
// created). Not syncfs(2): package durable says why, once. (The cache's small files, discovery
// answers, are made durable as they are written: durable.WriteFileIn.)
func (s *Store) Sync() error {
	if !s.dirty.Swap(false) || s.root == nil {
		return nil
	}
	s.syncs.Add(1)
	var errs []error
	s.eachLog(func(l *rlog) {
		l.mu.Lock()
		if !l.unsynced || l.seg == nil {
			l.mu.Unlock()
			return
		}
		l.unsynced = false
		sg := l.seg.acquire()
		l.mu.Unlock()
		defer sg.release()
		if err := durable.Fdatasync(sg.f); err != nil {
			l.mu.Lock()
			l.unsynced = true
			l.mu.Unlock()
			errs = append(errs, fmt.Errorf("cache: fdatasync %s: %w", l.name, err))
		}
	})
	s.smu.Lock()
	dirs := s.unsyncedDirs
	s.unsyncedDirs = nil
	s.smu.Unlock()
	for rel := range dirs {
		d, err := s.root.Open(rel)
		if err == nil {
			err = d.Sync()
			d.Close()
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("cache: fsync %s: %w", rel, err))
			s.unsyncedDir(rel)
		}
	}
	if len(errs) > 0 {
		s.markDirty()
		return errors.Join(errs...)
	}
	return nil
}

// markDirty notes that something was written and wakes RunSync if nothing was waiting before.
func (d *disk) markDirty() {
	if !d.dirty.Swap(true) {
		select {
		case d.dirtied <- struct{}{}:
		default:
		}
	}
}

// unsyncedDir notes a directory (a file created in it) for the next Sync.
func (d *disk) unsyncedDir(rel string) {
	d.smu.Lock()
	defer d.smu.Unlock()
	if d.unsyncedDirs == nil {
		d.unsyncedDirs = map[string]bool{}
	}
	d.unsyncedDirs[rel] = true
}

// RunSync syncs what was written at most once per interval until ctx ends, then a last time. It
// sleeps while nothing is written (no timer ticks on an idle hub), and syncs at once when the last
// sync is an interval old (almost: an eighth of it is tolerated), so the sync after the writer's
// batch runs in the same wake-up as the batch.
func (s *Store) RunSync(ctx context.Context, interval time.Duration) {
	var last time.Time
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			_ = s.Sync()
			return
		case <-s.dirtied:
		}
		if wait := time.Until(last.Add(interval)); wait > interval/8 {
			t.Reset(wait)
			select {
			case <-ctx.Done():
				_ = s.Sync()
				return
			case <-t.C:
			}
		}
		last = time.Now()
		if err := s.Sync(); err != nil {
			s.log.Warn("cache: sync failed", "err", err)
		}
	}
}
