package cache

// upgrade rewrites a version 1 log (record checksums without the file's salt, frame.go) as
// version 2, once, when it is opened: compaction writes the new file with a salt of its own and
// renames it over the old one, so a crash leaves one or the other. A read-only cache, or one
// whose rewrite fails (a full disk), goes on reading and appending to the version 1 log, and tries
// again at the next start.
func (l *rlog) upgrade() {
	if l.salted() || l.s.readOnly.Load() {
		return
	}
	if err := l.compact(); err != nil {
		l.s.log.Warn("cache: could not rewrite a log in the salted format; it is kept as it is", "log", l.name, "err", err)
		return
	}
	l.s.log.Info("cache: rewrote a log in the salted format", "log", l.name)
}
