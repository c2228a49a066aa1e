package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
)

// logName is a resource's log name: resource.version.group.
func logName(r Resource) string {
	g := r.Group
	if g == "" {
		g = "core"
	}
	return r.Resource + "." + r.Version + "." + g
}

// parseLogName reverses logName.
func parseLogName(s string) (resource, version, group string, ok bool) {
	resource, rest, ok1 := strings.Cut(s, ".")
	version, group, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 {
		return "", "", "", false
	}
	if group == "core" {
		group = ""
	}
	return resource, version, group, resource != "" && version != ""
}

// loadLogs reads every log below .logs (at Open, before the store is shared).
func (s *Store) loadLogs() error {
	if s.root == nil {
		return nil
	}
	entries, err := fs.ReadDir(s.root.FS(), logDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	s.mu.Lock() // the logs are opened under it, as logFor opens them (the quarantine relies on it)
	defer s.mu.Unlock()
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), logSuffix)
		if !ok || e.IsDir() {
			continue
		}
		if _, _, _, ok := parseLogName(name); !ok {
			continue
		}
		l := newRlog(s, name)
		if err := l.open(); err != nil {
			l.close()
			if errors.Is(err, ErrCorrupt) { // not even a log header: set aside, start anew
				s.log.Warn("cache: set aside a log that is not one", "log", name, "err", err)
				s.quarantineFile(filepath.Join(logDir, e.Name()))
				continue
			}
			// Unreadable, or empty on a full disk: the rest of the cache still answers.
			s.log.Warn("cache: a log cannot be read; its resource is not answered from the cache", "log", name, "err", err)
			continue
		}
		s.logs[name] = l
	}
	return nil
}

// logFor returns a resource's log, opening (creating) it when create is set.
func (s *Store) logFor(r Resource, create bool) (*rlog, error) {
	name := logName(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.logs[name]; l != nil || !create {
		return l, nil
	}
	if err := s.writable(); err != nil {
		return nil, err
	}
	if err := s.root.MkdirAll(logDir, 0o700); err != nil {
		s.failed(err)
		return nil, err
	}
	l := newRlog(s, name)
	if err := l.open(); err != nil {
		l.close()
		s.failed(err)
		return nil, err
	}
	s.logs[name] = l
	return l, nil
}

func (s *Store) eachLog(fn func(*rlog)) {
	s.mu.Lock()
	logs := make([]*rlog, 0, len(s.logs))
	for _, l := range s.logs {
		logs = append(logs, l)
	}
	s.mu.Unlock()
	for _, l := range logs {
		fn(l)
	}
}
