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
func (d *disk) ReadOnly() (bool, string) {
	if !d.readOnly.Load() {
		return false, ""
	}
	if p := d.roErr.Load(); p != nil {
		return true, *p
	}
	return true, "read-only"
}

func (d *disk) setReadOnly(err error) {
	msg := err.Error()
	d.roErr.Store(&msg)
	if !d.readOnly.Swap(true) {
		d.log.Warn("cache: the cache directory cannot be written; answering from what it holds, writing nothing", "dir", d.path, "err", err)
	}
}

// failed notes a failed write: a file system that turned read-only stops all writes.
func (d *disk) failed(err error) {
	if errors.Is(err, unix.EROFS) {
		d.setReadOnly(err)
	}
}

func (d *disk) writable() error {
	if d.readOnly.Load() {
		return ErrReadOnly
	}
	return nil
}
