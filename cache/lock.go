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
