package cache

import (
	"errors"
	"fmt"
	"io/fs"

	"nodehub/durable"
)

// writeAtomic writes one of the cache's own small files (a discovery answer), durable before it
// returns (durable.WriteFileIn: a temporary file, its fdatasync, the rename, the directory's
// fsync). They are written only when they change, which is seldom.
func (d *disk) writeAtomic(rel string, data []byte) error {
	if err := d.writable(); err != nil {
		return err
	}
	if err := durable.WriteFileIn(d.root, rel, data, 0o600); err != nil {
		d.failed(err)
		return fmt.Errorf("cache: write %s: %w", rel, err)
	}
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
