package cache

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// isReadOnlyErr reports whether err says the file system cannot be written (read-only, or a
// permission the process lacks).
func isReadOnlyErr(err error) bool {
	return errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM)
}

// ReadOnly reports whether the cache cannot be written (its file system is read-only, or turned
// so), and why. The cache still answers from what it holds.
func (s *Store) ReadOnly() (bool, string) {
	if !s.readOnly.Load() {
		return false, ""
	}
	if p := s.roErr.Load(); p != nil {
		return true, *p
	}
	return true, "read-only"
}

func (s *Store) setReadOnly(err error) {
	msg := err.Error()
	s.roErr.Store(&msg)
	if !s.readOnly.Swap(true) {
		s.log.Warn("cache: the cache directory cannot be written; answering from what it holds, writing nothing", "dir", s.path, "err", err)
	}
}

// failed notes a failed write: a file system that turned read-only stops all writes.
func (s *Store) failed(err error) {
	if errors.Is(err, unix.EROFS) {
		s.setReadOnly(err)
	}
}

func (s *Store) writable() error {
	if s.readOnly.Load() {
		return ErrReadOnly
	}
	return nil
}
