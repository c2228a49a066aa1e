package cache

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// A region of a log that fails its checks, or a file that is not a log, is kept in .quarantine
// for a look (the newest maxQuarantine of them). That happens only while a log is opened, and a log
// is opened only under the store's mu (logFor, loadLogs) or in a view (ReadFile), which writes
// nothing: so the quarantine needs no lock of its own.

const (
	quarantineDir = ".quarantine"
	maxQuarantine = 100
)

// quarantineBytes keeps a corrupt region of a log (up to 1 MiB of it) for a look.
func (d *disk) quarantineBytes(name string, f *os.File, from, to int64) {
	if d.readOnly.Load() {
		return
	}
	n := min(to-from, 1<<20)
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, from); err != nil && !errors.Is(err, io.EOF) {
		return
	}
	if err := d.root.MkdirAll(quarantineDir, 0o700); err != nil {
		return
	}
	dst := filepath.Join(quarantineDir, strconv.FormatInt(time.Now().UnixNano(), 36)+"-"+name+"@"+strconv.FormatInt(from, 10))
	_ = d.root.WriteFile(dst, buf, 0o600)
	d.trimQuarantine()
}

// quarantineFile moves a whole file aside (a file that is not a log).
func (d *disk) quarantineFile(rel string) {
	if d.readOnly.Load() {
		return
	}
	if err := d.root.MkdirAll(quarantineDir, 0o700); err != nil {
		return
	}
	dst := filepath.Join(quarantineDir, strconv.FormatInt(time.Now().UnixNano(), 36)+"-"+strings.ReplaceAll(filepath.ToSlash(rel), "/", "_"))
	if err := d.root.Rename(rel, dst); err != nil {
		_ = d.root.Remove(rel)
	}
	d.trimQuarantine()
}

func (d *disk) trimQuarantine() {
	entries, err := fs.ReadDir(d.root.FS(), quarantineDir)
	if err == nil && len(entries) > maxQuarantine {
		for _, e := range entries[:len(entries)-maxQuarantine] {
			_ = d.root.Remove(filepath.Join(quarantineDir, e.Name()))
		}
	}
}
