package cache

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// openDir creates the cache directory if it can, takes its lock (not for a view) and opens it as
// the root. A read-only file system without the directory leaves the root nil.
func (s *Store) openDir(dir string, view bool) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		if !isReadOnlyErr(err) {
			return fmt.Errorf("cache: %w", err)
		}
		s.setReadOnly(err)
	}
	if !view {
		if err := s.takeLock(dir); err != nil {
			return err
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		if s.lock != nil {
			s.lock.Close()
		}
		if errors.Is(err, fs.ErrNotExist) && s.readOnly.Load() {
			return nil // an empty cache that stays empty
		}
		return fmt.Errorf("cache: %w", err)
	}
	s.root = root
	return nil
}

func (s *Store) takeLock(dir string) error {
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil && isReadOnlyErr(err) {
		s.setReadOnly(err)
		if lock, err = os.Open(filepath.Join(dir, ".lock")); err != nil {
			lock, err = os.Open(dir) // flock works on the directory too
		}
	}
	if err != nil && s.readOnly.Load() && errors.Is(err, fs.ErrNotExist) {
		return nil // nothing there, and nothing will be written
	}
	if err != nil {
		return fmt.Errorf("cache: lock: %w", err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		pid, _ := io.ReadAll(io.LimitReader(lock, 32))
		lock.Close()
		return fmt.Errorf("%w: %s (pid %s)", ErrLocked, dir, strings.TrimSpace(string(pid)))
	}
	if !s.readOnly.Load() {
		_ = lock.Truncate(0)
		_, _ = lock.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	s.lock = lock
	return nil
}
