package cache

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// pending is what the next Sync makes durable: the logs appended to note it themselves
// (logFile.unsynced); the small files written and the directories whose entries changed are noted here.
type pending struct {
	dirty   atomic.Bool
	dirtied chan struct{} // RunSync's wake-up: something was written since the last sync

	smu                         sync.Mutex // small files and directories to fsync at the next Sync
	unsyncedFiles, unsyncedDirs map[string]bool
}

// Sync makes everything written so far durable, if anything was written: one fdatasync(2) per log
// appended to since the last sync, an fsync of each small file written (discovery answers) and of
// the directories whose entries changed. Not syncfs(2): that flushes whatever else is dirty on the
// file system (on a gateway, often the root file system: other programs' writes, flushed sooner
// and more often than the kernel would, more flash wear), and what it costs the hub grows with
// what others wrote (measured here, one round a second: syncfs 0.15–0.6 ms of CPU depending on
// what else was being written, the fdatasync 0.24 ms; BenchmarkSyncAfterAWrite).
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
		if err := unix.Fdatasync(int(sg.f.Fd())); err != nil {
			l.mu.Lock()
			l.unsynced = true
			l.mu.Unlock()
			errs = append(errs, fmt.Errorf("cache: fdatasync %s: %w", l.name, err))
		}
	})
	s.smu.Lock()
	files, dirs := s.unsyncedFiles, s.unsyncedDirs
	s.unsyncedFiles, s.unsyncedDirs = nil, nil
	s.smu.Unlock()
	for rel := range files {
		f, err := s.root.Open(rel)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since
		}
		if err == nil {
			err = f.Sync()
			f.Close()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("cache: fsync %s: %w", rel, err))
			s.unsynced(rel, "")
		}
	}
	for rel := range dirs {
		d, err := s.root.Open(rel)
		if err == nil {
			err = d.Sync()
			d.Close()
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("cache: fsync %s: %w", rel, err))
			s.unsynced("", rel)
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

// unsynced notes a small file (written and renamed into place) or a directory (a file created or
// renamed in it) for the next Sync.
func (d *disk) unsynced(file, dir string) {
	d.smu.Lock()
	defer d.smu.Unlock()
	if file != "" {
		if d.unsyncedFiles == nil {
			d.unsyncedFiles = map[string]bool{}
		}
		d.unsyncedFiles[file] = true
	}
	if dir != "" {
		if d.unsyncedDirs == nil {
			d.unsyncedDirs = map[string]bool{}
		}
		d.unsyncedDirs[dir] = true
	}
}

// syncDir makes a rename in a directory durable.
func (d *disk) syncDir(rel string) {
	if dir, err := d.root.Open(rel); err == nil {
		_ = dir.Sync()
		dir.Close()
	}
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
