package durable

import (
	"fmt"
	"os"
	"path/filepath"
)

// Pending is a file written as a stream in place of another (CreateIn): a temporary file in the
// same directory until Commit makes it durable and renames it over the old one. Cleanup (or an
// error of Commit's) removes the temporary file. It is not safe for concurrent use.
type Pending struct {
	dir       *os.Root
	dirName   string // for errors
	tmp, name string
	f         *os.File
	fsyncDir  func(*os.File) error // (*os.File).Sync; tests fail it
}

// CreateIn starts the file rel inside root (created with perm when committed), creating its
// directory (0700) when missing.
func CreateIn(root *os.Root, rel string, perm os.FileMode) (*Pending, error) {
	dirRel := filepath.Dir(rel)
	if err := root.MkdirAll(dirRel, 0o700); err != nil {
		return nil, err
	}
	dir, err := root.OpenRoot(dirRel)
	if err != nil {
		return nil, err
	}
	p := &Pending{dir: dir, dirName: filepath.Join(root.Name(), dirRel), name: filepath.Base(rel), fsyncDir: (*os.File).Sync}
	p.f, p.tmp, err = createTemp(dir, p.dirName, p.name, perm)
	if err != nil {
		dir.Close()
		return nil, err
	}
	return p, nil
}

// Write appends to the file.
func (p *Pending) Write(b []byte) (int, error) {
	if p.f == nil {
		return 0, fmt.Errorf("durable: write %s: %w", p.path(), os.ErrClosed)
	}
	return p.f.Write(b)
}

// Commit makes the file durable (fdatasync), renames it over the old one and fsyncs the
// directory. It returns the file, still open for reading and writing, now the caller's to close.
// When only the directory's fsync failed (ErrDirNotSynced) it returns the file with the error: the
// file is in place. On any other error the temporary file is gone and the old one is left.
func (p *Pending) Commit() (*os.File, error) {
	if p.f == nil {
		return nil, fmt.Errorf("durable: commit %s: %w", p.path(), os.ErrClosed)
	}
	err := Fdatasync(p.f)
	if err == nil {
		err = p.dir.Rename(p.tmp, p.name)
	}
	if err != nil {
		p.Cleanup()
		return nil, fmt.Errorf("durable: write %s: %w", p.path(), err)
	}
	f := p.f
	p.f = nil
	err = syncDir(p.dir, p.dirName, p.fsyncDir)
	_ = p.dir.Close()
	return f, err
}

// Cleanup ends a file not committed: its temporary file is closed and removed. After Commit it
// does nothing.
func (p *Pending) Cleanup() {
	if p.f == nil {
		return
	}
	_ = p.f.Close()
	p.f = nil
	_ = p.dir.Remove(p.tmp)
	_ = p.dir.Close()
}

func (p *Pending) path() string { return filepath.Join(p.dirName, p.name) }
