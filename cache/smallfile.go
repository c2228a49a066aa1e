package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// writeAtomic writes one of the cache's own small files (a discovery answer): a temporary file
// renamed over the old one.
func (s *Store) writeAtomic(rel string, data []byte) error {
	if err := s.writable(); err != nil {
		return err
	}
	dir := filepath.Dir(rel)
	tmp := filepath.Join(dir, tmpPrefix+filepath.Base(rel)+"."+strconv.FormatUint(s.tmpSeq.Add(1), 36))
	f, err := s.root.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		if err = s.root.MkdirAll(dir, 0o700); err == nil {
			f, err = s.root.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		}
	}
	if err != nil {
		s.failed(err)
		return fmt.Errorf("cache: write %s: %w", rel, err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.root.Rename(tmp, rel)
	}
	if err != nil {
		_ = s.root.Remove(tmp)
		s.failed(err)
		return fmt.Errorf("cache: write %s: %w", rel, err)
	}
	s.unsynced(rel, dir)
	s.markDirty()
	s.written.Add(int64(len(data)))
	s.records.Add(1)
	return nil
}

// readMeta reads one of the cache's own small files.
func (s *Store) readMeta(rel string) ([]byte, error) {
	if s.root == nil {
		return nil, ErrNotFound
	}
	b, err := s.root.ReadFile(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	return b, err
}

// writeMeta writes one of the cache's own small files.
func (s *Store) writeMeta(rel string, data []byte) error { return s.writeAtomic(rel, data) }
