package cache

import (
	"bufio"
	"fmt"

	"nodehub/durable"
)

// emitFunc appends one record (its payload) to a log being rewritten and returns where it went.
type emitFunc func(payload []byte) (off int64, n uint32, err error)

// rewrite replaces the log's file by one holding what fill emits, under a new salt, through
// durable's streaming form: a temporary file, fdatasynced, renamed over the old one, the directory
// fsynced, so a crash leaves the old file or the new one. Then reads and appends go to the new file
// (readers of the old one keep it open until they are done). A directory that could not be
// fsynced is retried by the next Sync. Callers hold l.mu.
func (l *logFile) rewrite(fill func(emitFunc) error) error {
	p, err := durable.CreateIn(l.d.root, l.path(), 0o600)
	if err != nil {
		l.d.failed(err)
		return fmt.Errorf("cache: compact %s: %w", l.name, err)
	}
	fail := func(err error) error {
		p.Cleanup()
		l.d.failed(err)
		return fmt.Errorf("cache: compact %s: %w", l.name, err)
	}
	w := bufio.NewWriterSize(p, 64<<10)
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
	f, err := p.Commit()
	if f == nil {
		return fail(err)
	}
	if err != nil { // the new file is in place, its directory entry not yet durable
		l.d.failed(err)
		l.d.log.Warn("cache: compacted log's directory not synced, retried at the next sync", "log", l.name, "err", err)
		l.d.unsyncedDir(logDir)
		l.d.markDirty()
	}
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
