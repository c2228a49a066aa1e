// Package durable replaces small files so that a crash or a power cut leaves each one either
// whole and old or whole and new: the node's certificates, the identity table, static pod
// manifests (OTA), the tokens kept for offline token requests, and the cache's own small files.
// (The cache's append-only logs have their own contract: cache's package comment.)
//
// One path, three forms. A Batch replaces and removes files of one directory together: each new
// file is written to a hidden temporary file (TempPrefix) in that directory and made durable
// (fdatasync) as it is added; Commit renames them over the old files, removes what is to go and
// fsyncs the directory once, so the renames and removals survive a power cut. WriteFile is a
// batch of one file. A Pending file (CreateIn) is one file written as a stream (the cache's log
// compaction): the same temporary file, fdatasynced, renamed and the directory fsynced at Commit.
// A crash before Commit leaves the old files and temporary ones (TempPrefix), which the
// directory's reader removes when it next starts. A directory that cannot be fsynced fails the
// Commit (ErrDirNotSynced), though its renames are done.
//
// The sync decision, made here once: an fdatasync(2) of each file written and an fsync(2) of the
// directory, never syncfs(2). syncfs flushes whatever else is dirty on the file system, and on a
// gateway that is often the root file system: other programs' writes would be flushed sooner and
// more often than the kernel would (more flash wear), and what a sync costs the hub would grow
// with what others wrote (measured in cache's BenchmarkSyncAfterAWrite: syncfs 0.15–0.6 ms of CPU
// a round depending on what else was written, the fdatasync 0.24 ms). The cache syncs its logs
// with Fdatasync for the same reason.
package durable

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// TempPrefix starts the name of every temporary file: hidden (kubelet and other directory
// readers ignore dot files), and removed by the directory's reader after a crash.
const TempPrefix = ".tmp-"

// Fdatasync makes a file's data durable, and the metadata needed to read it back (its size), but
// not its times: the sync of every file this package writes, and of the cache's logs.
func Fdatasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }

// WriteFile replaces path with data (perm), creating its directory (0700) when missing: the
// single form, a batch of one file.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	b, err := NewBatch(filepath.Dir(path))
	if err != nil {
		return err
	}
	if err := b.Write(filepath.Base(path), data, perm); err != nil {
		b.Abort()
		return err
	}
	return b.Commit()
}

// WriteFileIn is WriteFile for a path inside root (the cache's directory, opened as an os.Root).
func WriteFileIn(root *os.Root, rel string, data []byte, perm os.FileMode) error {
	b, err := NewBatchIn(root, filepath.Dir(rel))
	if err != nil {
		return err
	}
	if err := b.Write(filepath.Base(rel), data, perm); err != nil {
		b.Abort()
		return err
	}
	return b.Commit()
}

// Batch is a set of changes to one directory made durable together (see the package comment).
// It is not safe for concurrent use; Commit or Abort ends it.
type Batch struct {
	dir     *os.Root
	name    string // for errors
	temps   []temp
	removes []string
}

type temp struct{ tmp, name string }

// NewBatch starts a batch in dir, creating it (0700) when missing.
func NewBatch(dir string) (*Batch, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &Batch{dir: r, name: dir}, nil
}

// NewBatchIn starts a batch in the directory rel inside root, creating it (0700) when missing.
func NewBatchIn(root *os.Root, rel string) (*Batch, error) {
	if err := root.MkdirAll(rel, 0o700); err != nil {
		return nil, err
	}
	r, err := root.OpenRoot(rel)
	if err != nil {
		return nil, err
	}
	return &Batch{dir: r, name: filepath.Join(root.Name(), rel)}, nil
}

// Write adds the file name (in the batch's directory) with data and perm: written to a temporary
// file and made durable now, renamed over name at Commit. On an error the temporary file is gone
// and the batch goes on without it.
func (b *Batch) Write(name string, data []byte, perm os.FileMode) error {
	f, tmp, err := createTemp(b.dir, b.name, name, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = Fdatasync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = b.dir.Remove(tmp)
		return fmt.Errorf("durable: write %s: %w", filepath.Join(b.name, name), err)
	}
	b.temps = append(b.temps, temp{tmp, name})
	return nil
}

// createTemp creates the temporary file for name in dir (named dirName in errors), open for
// reading and writing, with perm whatever the umask.
func createTemp(dir *os.Root, dirName, name string, perm os.FileMode) (*os.File, string, error) {
	if strings.ContainsRune(name, filepath.Separator) || name == "." || name == ".." || name == "" {
		return nil, "", fmt.Errorf("durable: %q is not a file name in %s", name, dirName)
	}
	tmp := TempPrefix + name + "." + strconv.FormatUint(rand.Uint64(), 36)
	f, err := dir.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_RDWR, perm)
	if err == nil {
		if err = f.Chmod(perm); err != nil {
			f.Close()
			_ = dir.Remove(tmp)
		}
	}
	if err != nil {
		return nil, "", fmt.Errorf("durable: write %s: %w", filepath.Join(dirName, name), err)
	}
	return f, tmp, nil
}

// Remove adds the removal of the file name (a missing file is no error).
func (b *Batch) Remove(name string) { b.removes = append(b.removes, name) }

// Commit renames the batch's files into place, removes what is to go, fsyncs the directory once
// and ends the batch. On an error, what was renamed stays (each file whole), the rest is left as
// it was and the remaining temporary files are removed.
func (b *Batch) Commit() error {
	defer b.Abort()
	changed := false
	for len(b.temps) > 0 {
		t := b.temps[0]
		if err := b.dir.Rename(t.tmp, t.name); err != nil {
			return errors.Join(fmt.Errorf("durable: rename %s: %w", filepath.Join(b.name, t.name), err), b.syncDir(changed))
		}
		b.temps = b.temps[1:]
		changed = true
	}
	for _, name := range b.removes {
		err := b.dir.Remove(name)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return errors.Join(fmt.Errorf("durable: remove %s: %w", filepath.Join(b.name, name), err), b.syncDir(changed))
		}
		changed = changed || err == nil
	}
	return b.syncDir(changed)
}

// syncDir fsyncs the batch's directory when something in it changed.
func (b *Batch) syncDir(changed bool) error {
	if !changed {
		return nil
	}
	return syncDir(b.dir, b.name, (*os.File).Sync)
}

// ErrDirNotSynced is in the error of a Commit that renamed its files into place but could not
// fsync the directory: the new files are in place, but a power cut may still bring the old ones
// back until the directory is synced.
var ErrDirNotSynced = errors.New("directory not synced")

// syncDir fsyncs dir (named name in errors) with fsync.
func syncDir(dir *os.Root, name string, fsync func(*os.File) error) error {
	d, err := dir.Open(".")
	if err == nil {
		err = fsync(d)
		if cerr := d.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("durable: sync %s: %w: %w", name, ErrDirNotSynced, err)
	}
	return nil
}

// Abort ends the batch without renaming anything: its temporary files are removed. After Commit
// it does nothing.
func (b *Batch) Abort() {
	if b.dir == nil {
		return
	}
	for _, t := range b.temps {
		_ = b.dir.Remove(t.tmp)
	}
	b.temps, b.removes = nil, nil
	_ = b.dir.Close()
	b.dir = nil
}
