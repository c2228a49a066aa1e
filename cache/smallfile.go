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
func (d *disk) writeAtomic(rel string, data []byte) error {
	if err := d.writable(); err != nil {
		return err
	}
	dir := filepath.Dir(rel)
	tmp := filepath.Join(dir, tmpPrefix+filepath.Base(rel)+"."+strconv.FormatUint(d.tmpSeq.Add(1), 36))
	f, err := d.root.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		if err = d.root.MkdirAll(dir, 0o700); err == nil {
			f, err = d.root.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		}
	}
	if err != nil {
		d.failed(err)
		return fmt.Errorf("cache: write %s: %w", rel, err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = d.root.Rename(tmp, rel)
	}
	if err != nil {
		_ = d.root.Remove(tmp)
		d.failed(err)
		return fmt.Errorf("cache: write %s: %w", rel, err)
	}
	d.unsynced(rel, dir)
	d.markDirty()
	d.written.Add(int64(len(data)))
	d.records.Add(1)
	return nil
}

// readMeta reads one of the cache's own small files.
func (d *disk) readMeta(rel string) ([]byte, error) {
	if d.root == nil {
		return nil, ErrNotFound
	}
	b, err := d.root.ReadFile(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	return b, err
}

// writeMeta writes one of the cache's own small files.
func (d *disk) writeMeta(rel string, data []byte) error { return d.writeAtomic(rel, data) }
