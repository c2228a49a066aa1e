// Package cache keeps what a node's clients read from the cloud as flat files on local disk and
// reads it back for the offline proxy.
//
// # Layout
//
//	<root>/<owner>/<resource>.<version>.<group>/<namespace>/<name>   (namespaced objects)
//	<root>/<owner>/<resource>.<version>.<group>/<name>               (cluster-scoped objects)
//	<root>/<owner>/<resource>.<version>.<group>/.lists/<id>          (what each distinct list returned)
//	<root>/.quarantine/                                              (corrupt files, kept for a look)
//	<root>/.lock                                                     (one process per cache directory)
//
// The owner is the client component (kubelet, kube-proxy, …), or component@credential for
// requests that carried credentials of their own, so nothing cached for one credential is read
// back for another. Every path is opened through an os.Root, so no name escapes the directory.
//
// # What survives a crash
//
// An object is written to a temporary file in its own directory and renamed over the old one, so a
// reader sees the old file or the new one, never a mix. Each file carries a CRC-32C of its header
// and body; a file torn by a power cut (possible because durability is batched) fails the check,
// is moved to .quarantine and is never served. Durability is batched: one syncfs(2) of the cache
// file system per sync interval when anything was written, not one fsync per object, because
// flash wears with every flush. So a power cut loses at most the last interval's writes, and the
// checksum guarantees what is left is either right or not served. Temporary files left by a crash
// are removed at start.
package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNotFound is returned for an object that is not cached.
var ErrNotFound = errors.New("cache: not found")

// ErrLocked is returned by Open when another process holds the cache directory.
var ErrLocked = errors.New("cache: directory in use by another process")

const (
	tmpPrefix     = ".tmp-"
	listsDir      = ".lists"
	quarantineDir = ".quarantine"
	maxQuarantine = 100
)

// Store is the flat-file store under one directory. Safe for concurrent use; writes to one key
// must come from one goroutine at a time (the Writer's per-resource goroutine).
type Store struct {
	root *os.Root
	path string
	lock *os.File
	log  *slog.Logger

	dirty   atomic.Bool
	size    atomic.Int64 // bytes in cache files (kept up to date by writes and deletes)
	syncs   atomic.Int64
	written atomic.Int64 // bytes written to files
	files   atomic.Int64 // files written
	tmpSeq  atomic.Uint64

	qmu sync.Mutex // quarantine moves

	// hook, when set (tests), runs before every file write; an error fails the write.
	hook func(rel string) error
}

// Open opens (creating it if needed) the cache directory, takes its lock and removes temporary
// files a crash left behind.
func Open(dir string, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cache: lock: %w", err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		pid, _ := io.ReadAll(io.LimitReader(lock, 32))
		lock.Close()
		return nil, fmt.Errorf("%w: %s (pid %s)", ErrLocked, dir, strings.TrimSpace(string(pid)))
	}
	_ = lock.Truncate(0)
	_, _ = lock.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	root, err := os.OpenRoot(dir)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("cache: %w", err)
	}
	s := &Store{root: root, path: dir, lock: lock, log: log}
	s.recount()
	if n, err := s.removeTemps(); err != nil {
		s.Close()
		return nil, err
	} else if n > 0 {
		log.Info("cache: removed temporary files left by a crash", "count", n)
	}
	return s, nil
}

// Close syncs outstanding writes and releases the lock.
func (s *Store) Close() error {
	err := s.Sync()
	s.root.Close()
	s.lock.Close() // releases the flock
	return err
}

// Path is the cache directory.
func (s *Store) Path() string { return s.path }

// removeTemps deletes every temporary file below the root.
func (s *Store) removeTemps() (int, error) {
	n := 0
	err := fs.WalkDir(s.root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // a vanished entry is fine
		}
		if d.IsDir() && d.Name() == quarantineDir {
			return fs.SkipDir
		}
		if !d.IsDir() && strings.HasPrefix(d.Name(), tmpPrefix) {
			if s.root.Remove(p) == nil {
				n++
			}
		}
		return nil
	})
	return n, err
}

// Put writes an object atomically: a temporary file in the object's directory, renamed over the old.
func (s *Store) Put(k Key, h *Header, body []byte) error {
	if err := k.validate(); err != nil {
		return err
	}
	data, err := encodeFile(h, body)
	if err != nil {
		return fmt.Errorf("cache: put %s: %w", k.Path(), err)
	}
	return s.writeAtomic(k.Path(), data)
}

func (s *Store) writeAtomic(rel string, data []byte) error {
	dir := filepath.Dir(rel)
	tmp := filepath.Join(dir, tmpPrefix+filepath.Base(rel)+"."+strconv.FormatUint(s.tmpSeq.Add(1), 36))
	if s.hook != nil {
		if err := s.hook(rel); err != nil {
			return fmt.Errorf("cache: write %s: %w", rel, err)
		}
	}
	f, err := s.root.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		if err = s.root.MkdirAll(dir, 0o700); err == nil {
			f, err = s.root.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		}
	}
	if err != nil {
		return fmt.Errorf("cache: write %s: %w", rel, err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	var old int64
	if fi, serr := s.root.Lstat(rel); serr == nil {
		old = fi.Size()
	}
	if err == nil {
		err = s.root.Rename(tmp, rel)
	}
	if err != nil {
		_ = s.root.Remove(tmp)
		return fmt.Errorf("cache: write %s: %w", rel, err)
	}
	s.size.Add(int64(len(data)) - old)
	s.dirty.Store(true)
	s.written.Add(int64(len(data)))
	s.files.Add(1)
	return nil
}

// Delete removes an object; a missing one is not an error.
func (s *Store) Delete(k Key) error {
	if err := k.validate(); err != nil {
		return err
	}
	fi, serr := s.root.Lstat(k.Path())
	if err := s.root.Remove(k.Path()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cache: delete %s: %w", k.Path(), err)
	}
	if serr == nil {
		s.size.Add(-fi.Size())
	}
	s.dirty.Store(true)
	return nil
}

// Size is the bytes the cache's files take (their contents, not the file system's blocks).
func (s *Store) Size() int64 { return s.size.Load() }

// recount sets Size from the files on disk (at start, and after removing whole directories).
func (s *Store) recount() {
	var n int64
	_ = fs.WalkDir(s.root.FS(), ".", func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	s.size.Store(n)
}

// Get reads and checks an object. A corrupt file is quarantined and reported as ErrNotFound
// wrapped with ErrCorrupt.
func (s *Store) Get(k Key) (*Header, []byte, error) {
	if err := k.validate(); err != nil {
		return nil, nil, err
	}
	return s.read(k.Path(), k.Resource.Resource)
}

func (s *Store) read(rel, resource string) (*Header, []byte, error) {
	data, err := s.root.ReadFile(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, ErrNotFound
	}
	if err != nil {
		return nil, nil, fmt.Errorf("cache: read %s: %w", rel, err)
	}
	h, body, err := decodeFile(data, resource)
	if err != nil {
		s.quarantine(rel, err)
		return nil, nil, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return h, body, nil
}

// Header reads just an object's header (the body is not checked).
func (s *Store) Header(k Key) (*Header, error) {
	if err := k.validate(); err != nil {
		return nil, err
	}
	f, err := s.root.Open(k.Path())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	bp := headerBufs.Get().(*[]byte)
	defer headerBufs.Put(bp)
	buf := *bp
	n, _ := io.ReadFull(f, buf)
	h, need, err := decodeHeader(buf[:n])
	if err == nil && h == nil && need > 0 {
		more := make([]byte, need)
		copy(more, buf[:n])
		if _, err = io.ReadFull(f, more[n:]); err == nil {
			h, _, err = decodeHeader(more)
		}
	}
	if err != nil || h == nil {
		// A YurtHub file, or a torn one: read it whole, which checks (and quarantines) it.
		h, _, err = s.read(k.Path(), k.Resource.Resource)
	}
	return h, err
}

// headerBufs hold the first bytes of files read for their headers (most headers are a few
// hundred bytes; a longer one is read in full).
var headerBufs = sync.Pool{New: func() any { b := make([]byte, 1024); return &b }}

// Keys calls fn with every object of a resource, in one namespace or ("" ) all of them, in
// directory order. Cluster-scoped objects have no namespace directory.
func (s *Store) Keys(r Resource, namespace string, fn func(Key) error) error {
	base := r.Dir()
	walkDir := func(rel, ns string) error {
		entries, err := fs.ReadDir(s.root.FS(), filepath.ToSlash(rel))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, e := range entries {
			name := e.Name()
			if strings.HasPrefix(name, ".") {
				continue
			}
			if e.IsDir() {
				if ns == "" && namespace == "" {
					if err := s.Keys(r, unescape(name), fn); err != nil {
						return err
					}
				}
				continue
			}
			if err := fn(Key{Resource: r, Namespace: ns, Name: unescape(name)}); err != nil {
				return err
			}
		}
		return nil
	}
	if namespace != "" {
		return walkDir(filepath.Join(base, escape(namespace)), namespace)
	}
	return walkDir(base, "")
}

// quarantine moves a corrupt file aside (keeping the newest maxQuarantine) so it is never read again.
func (s *Store) quarantine(rel string, why error) {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if err := s.root.MkdirAll(quarantineDir, 0o700); err != nil {
		_ = s.root.Remove(rel)
		return
	}
	dst := filepath.Join(quarantineDir, strconv.FormatInt(time.Now().UnixNano(), 36)+"-"+strings.ReplaceAll(filepath.ToSlash(rel), "/", "_"))
	if err := s.root.Rename(rel, dst); err != nil {
		_ = s.root.Remove(rel)
	}
	s.log.Warn("cache: quarantined a corrupt file", "file", rel, "err", why)
	entries, err := fs.ReadDir(s.root.FS(), quarantineDir)
	if err == nil && len(entries) > maxQuarantine {
		for _, e := range entries[:len(entries)-maxQuarantine] {
			_ = s.root.Remove(filepath.Join(quarantineDir, e.Name()))
		}
	}
}

// Verify reads every file once and quarantines the ones that fail their checksum. It is meant to
// run once in the background after start.
func (s *Store) Verify(ctx context.Context) (checked, bad int) {
	_ = fs.WalkDir(s.root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			return nil
		}
		if d.IsDir() {
			if p != "." && strings.HasPrefix(d.Name(), ".") {
				return fs.SkipDir // the cache's own files
			}
			return nil
		}
		parts := strings.Split(p, "/")
		if strings.HasPrefix(d.Name(), ".") || len(parts) < 3 {
			return nil
		}
		resource, _, _ := strings.Cut(parts[1], ".")
		checked++
		if _, _, err := s.read(p, resource); errors.Is(err, ErrCorrupt) {
			bad++
		}
		return nil
	})
	return checked, bad
}

// Sync makes everything written so far durable with one syncfs(2), if anything was written.
func (s *Store) Sync() error {
	if !s.dirty.Swap(false) {
		return nil
	}
	s.syncs.Add(1)
	if err := unix.Syncfs(int(s.lock.Fd())); err != nil {
		s.dirty.Store(true)
		return fmt.Errorf("cache: syncfs: %w", err)
	}
	return nil
}

// RunSync syncs once per interval until ctx ends, then a last time.
func (s *Store) RunSync(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			_ = s.Sync()
			return
		case <-t.C:
			if err := s.Sync(); err != nil {
				s.log.Warn("cache: sync failed", "err", err)
			}
		}
	}
}

// Stats are the store's counters since Open.
type Stats struct {
	Syncs, FilesWritten, BytesWritten int64
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	return Stats{Syncs: s.syncs.Load(), FilesWritten: s.files.Load(), BytesWritten: s.written.Load()}
}

// writeMeta writes one of the cache's own small files (a list record) atomically.
func (s *Store) writeMeta(rel string, data []byte) error { return s.writeAtomic(rel, data) }

// readMeta reads one of the cache's own small files.
func (s *Store) readMeta(rel string) ([]byte, error) {
	b, err := s.root.ReadFile(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	return b, err
}

// removeAll removes a directory below the root.
func (s *Store) removeAll(rel string) error {
	s.dirty.Store(true)
	defer s.recount()
	return s.root.RemoveAll(rel)
}

// readDirNames lists the directories below rel that are not the cache's own (no leading dot).
func readDirNames(s *Store, rel string) ([]string, error) {
	entries, err := fs.ReadDir(s.root.FS(), rel)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// eachObject reads, in namespace/name order, every object file of a resource in one namespace or
// ("") all of them. Each directory is opened once through the root and its files relative to it
// (O_NOFOLLOW: no name leads out), which is several times cheaper than a path walk per file.
func (s *Store) eachObject(r Resource, namespace string, fn func(k Key, data []byte) error) error {
	base := r.Dir()
	if namespace != "" {
		return s.scanDir(filepath.Join(base, escape(namespace)), func(name string, data []byte, isDir bool) error {
			if isDir {
				return nil
			}
			return fn(Key{Resource: r, Namespace: namespace, Name: unescape(name)}, data)
		})
	}
	return s.scanDir(base, func(name string, data []byte, isDir bool) error {
		if !isDir {
			return fn(Key{Resource: r, Name: unescape(name)}, data) // a cluster-scoped object
		}
		ns := unescape(name)
		return s.scanDir(filepath.Join(base, name), func(name string, data []byte, isDir bool) error {
			if isDir {
				return nil
			}
			return fn(Key{Resource: r, Namespace: ns, Name: unescape(name)}, data)
		})
	})
}

// scanDir calls fn for each entry of a directory below the root that is not the cache's own, in
// name order, with the file's bytes (nil for a directory).
func (s *Store) scanDir(rel string, fn func(name string, data []byte, isDir bool) error) error {
	d, err := s.root.Open(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return err
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	dfd := int(d.Fd())
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		if e.IsDir() {
			if err := fn(name, nil, true); err != nil {
				return err
			}
			continue
		}
		data, err := readAt(dfd, name)
		if err != nil {
			continue // gone meanwhile, or not a regular file: nothing to serve
		}
		if err := fn(name, data, false); err != nil {
			return err
		}
	}
	return nil
}

// readAt reads a regular file by name relative to an open directory.
func readAt(dfd int, name string) ([]byte, error) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size > maxBody+maxHeader+preambleLen {
		return nil, fs.ErrInvalid
	}
	buf := make([]byte, st.Size)
	for off := 0; off < len(buf); {
		n, err := unix.Read(fd, buf[off:])
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return buf[:off], nil
		}
		off += n
	}
	return buf, nil
}

// dirCache keeps the directories a batch writes into open, so reading the header of each object
// before writing it costs an openat and a read, not a walk of the whole path.
type dirCache struct {
	s    *Store
	dirs map[string]*os.File
}

func (c *dirCache) header(k Key) (*Header, error) {
	if err := k.validate(); err != nil {
		return nil, err
	}
	rel := k.Path()
	dir, name := filepath.Dir(rel), filepath.Base(rel)
	if c.dirs == nil {
		c.dirs = map[string]*os.File{}
	}
	d, ok := c.dirs[dir]
	if !ok {
		f, err := c.s.root.Open(dir)
		if err == nil {
			d = f
		}
		c.dirs[dir] = d
	}
	if d == nil {
		return nil, ErrNotFound
	}
	data, err := readAt(int(d.Fd()), name)
	if err != nil {
		return nil, ErrNotFound
	}
	h, _, err := decodeFile(data, k.Resource.Resource)
	if err != nil {
		return nil, err
	}
	return h, nil
}

func (c *dirCache) close() {
	for _, d := range c.dirs {
		if d != nil {
			d.Close()
		}
	}
}
