package cache

import (
	"bufio"
	"fmt"
	"os"
)

// emitFunc appends one record (its payload) to a log being rewritten and returns where it went.
type emitFunc func(payload []byte) (off int64, n uint32, err error)

// rewrite replaces the log's file by one holding what fill emits, under a new salt: a temporary
// file, fsynced, renamed over the old one, the directory fsynced, so a crash leaves the old file
// or the new one. Then reads and appends go to the new file (readers of the old one keep it open
// until they are done). Callers hold l.mu.
func (l *logFile) rewrite(fill func(emitFunc) error) error {
	tmp := l.path() + ".compact"
	f, err := l.d.root.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		l.d.failed(err)
		return fmt.Errorf("cache: compact %s: %w", l.name, err)
	}
	fail := func(err error) error {
		f.Close()
		_ = l.d.root.Remove(tmp)
		l.d.failed(err)
		return fmt.Errorf("cache: compact %s: %w", l.name, err)
	}
	w := bufio.NewWriterSize(f, 64<<10)
	hdr, seed := newLogHeader() // a new salt for the new file
	pos := int64(len(hdr))
	_, _ = w.Write(hdr)
	emit := func(p []byte) (int64, uint32, error) {
		rb := frame(p, seed)
		at := pos
		if _, err := w.Write(rb); err != nil {
			return 0, 0, err
		}
		pos += int64(len(rb))
		return at, uint32(len(rb)), nil
	}
	if err := fill(emit); err != nil {
		return fail(err)
	}
	if err := w.Flush(); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := l.d.root.Rename(tmp, l.path()); err != nil {
		return fail(err)
	}
	l.d.syncDir(logDir)
	old := l.seg
	l.seg = &segment{f: f, seed: seed, hdr: int64(len(hdr))}
	l.seg.refs.Store(1)
	old.release()
	written := pos - int64(len(hdr))
	l.setEnd(pos)
	l.d.compactions.Add(1)
	l.d.compacted.Add(written)
	l.d.log.Debug("cache: compacted a log", "log", l.name, "bytes", written)
	return nil
}
