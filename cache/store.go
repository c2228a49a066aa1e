// Package cache keeps what a node's clients read from the cloud on local disk and reads it back for
// the offline proxy. Flash wears by the bytes written, so objects share pages: every object of one
// resource, whoever read it, lives in one append-only log.
//
// # Layout
//
//	<root>/.logs/<resource>.<version>.<group>.log   (every owner's objects and lists of a resource)
//	<root>/.discovery/<hash>                        (discovery answers, one small file each)
//	<root>/.quarantine/                             (corrupt regions, kept for a look)
//	<root>/.lock                                    (one process per cache directory)
//
// A log is a sequence of checksummed records (record.go): an object's new version (put), an owner
// taking the same bytes another owner already stored (ref, a few dozen bytes: nothing is written
// twice because two components read it), a delete, a list's record, a list's new resourceVersion
// or completeness (listmeta: a bookmark does not rewrite the list), an owner dropped. The owner is
// the client component (kubelet, kube-proxy, …), or component@credential for requests that carried
// credentials of their own; each owner reads back only what it was answered. Memory holds an index
// (where each owner's record of each object is, and its resourceVersion), never the objects: reads
// come from the file, and the page cache does the caching.
//
// A list is recorded from a LIST's answer at its end, or from a watch-list's (a watch with
// sendInitialEvents, client-go's list since 1.35) at the BOOKMARK annotated k8s.io/initial-events-end
// that ends its ADDED events: the same record either way (owner, resource, namespace, selectors,
// the answer's resourceVersion, its keys), and the scope reconciled the same way (what the answer no
// longer holds leaves, unless another list holds it). An answer cut before its end records nothing;
// the list recorded before stays as it was. The events of a watch keep the objects current and move
// its list's resourceVersion with its bookmarks; a watch never creates a list otherwise.
//
// Bodies of 256 bytes or more are stored compressed with their header (compress.go, lz.go) when
// that saves an eighth: what the cloud sent is what is read back, byte for byte.
//
// A log is compacted when its dead bytes (superseded and deleted records) pass three times its live
// bytes and 1 MiB, so compaction writes at most a third of a byte for every byte appended, and a
// log takes at most four times what it holds (plus 1 MiB; sooner past --cache-max-bytes).
//
// The old nodehub layout (one file per object under <root>/<owner>/<resource>.<version>.<group>/)
// and YurtHub's (the same paths, holding the object's JSON) are read once at start, appended to the
// logs and removed.
//
// # What survives a crash
//
// Records are only ever appended. Durability is batched: once per sync interval when anything was
// written, one fdatasync(2) of each log appended to (and an fsync of each discovery file written
// and of each directory whose entries changed), not one fsync per object, because flash wears with
// every flush. A kill -9 loses nothing written (the page cache keeps it); a power cut loses at most the
// writes of the last interval. Every record carries a CRC-32C: at start a log is read record by
// record, and a record that fails its frame or checksum is never applied. At the tail it is a write
// the crash cut short, and the log is cut there, so what remains is a prefix of what was written: a
// consistent, older state, with the lists as they were then. A bad region followed by good records
// is corruption: it is skipped, copied to .quarantine, and every list of that resource is marked
// incomplete until it is listed again (the kubelet is not answered a partial pod list as if whole).
// A record is checked again every time it is read, so a torn or rotten one is never served.
//
// A failed write (ENOSPC, EIO) is cut back off the file, marks the resource's lists incomplete in
// memory at once and on disk before the next record of that resource. Compaction writes a new file,
// fsyncs it, renames it over the old one and fsyncs the directory: a crash leaves the old log or
// the new one. A read-only cache file system does not stop the hub: the logs are read, nothing is
// written, and ReadOnly says so.
package cache

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
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

// ErrReadOnly is returned for a write to a cache whose file system cannot be written.
var ErrReadOnly = errors.New("cache: read-only")

// ErrFull is returned for an offline change past its owner's quota or --cache-max-bytes.
var ErrFull = errors.New("cache: full")

const (
	tmpPrefix     = ".tmp-"
	logDir        = ".logs"
	logSuffix     = ".log"
	quarantineDir = ".quarantine"
	maxQuarantine = 100
	// DefaultLocalQuota bounds what one owner's offline changes (events created offline, above
	// all) take when --cache-max-bytes is not set; with it, an owner gets an eighth of it.
	DefaultLocalQuota = 8 << 20
)

// Store is the cache under one directory. Safe for concurrent use.
type Store struct {
	root *os.Root
	path string
	lock *os.File
	log  *slog.Logger

	mu   sync.Mutex // logs
	logs map[string]*rlog

	omu        sync.Mutex // owners
	owners     []string
	ownerIDs   map[string]int32
	ownerAt    []uint32 // newest record of each owner (Unix seconds)
	localBytes []int64  // bytes of each owner's offline changes

	liveBytes atomic.Int64 // live records of every log
	fileBytes atomic.Int64 // every log's file

	readOnly atomic.Bool
	roErr    atomic.Pointer[string]
	maxBytes atomic.Int64

	dirty       atomic.Bool
	dirtied     chan struct{} // RunSync's wake-up: something was written since the last sync
	syncs       atomic.Int64
	written     atomic.Int64 // bytes appended to logs (and discovery files)
	records     atomic.Int64 // records appended (and discovery files)
	compactions atomic.Int64
	compacted   atomic.Int64 // bytes compaction wrote
	corrupt     atomic.Int64 // corrupt records or regions found
	tmpSeq      atomic.Uint64

	qmu sync.Mutex // quarantine

	smu                         sync.Mutex // small files and directories to fsync at the next Sync
	unsyncedFiles, unsyncedDirs map[string]bool

	// hook, when set (tests), runs before every record is appended; an error fails the write.
	hook func(rel string) error
	// clock, when set (tests), stamps records instead of time.Now.
	clock func() time.Time
}

// Open opens (creating it if needed) the cache directory, takes its lock, reads the logs and brings
// in a cache of the old layout. On a file system that cannot be written it opens the cache read-only
// (ReadOnly reports it) instead of failing.
func Open(dir string, log *slog.Logger) (*Store, error) {
	return open(dir, log, false)
}

// OpenView opens a cache another process may own, to look at (tools, tests): no lock is taken,
// nothing is written, and a record still being written is not read.
func OpenView(dir string) (*Store, error) {
	s, err := open(dir, slog.New(slog.DiscardHandler), true)
	if err != nil {
		return nil, err
	}
	if err := s.loadLogs(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func open(dir string, log *slog.Logger, view bool) (*Store, error) {
	if log == nil {
		log = slog.Default()
	}
	s := &Store{path: dir, log: log, logs: map[string]*rlog{}, ownerIDs: map[string]int32{}, dirtied: make(chan struct{}, 1)}
	if view {
		s.readOnly.Store(true)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		if !isReadOnlyErr(err) {
			return nil, fmt.Errorf("cache: %w", err)
		}
		s.setReadOnly(err)
	}
	if !view {
		if err := s.takeLock(dir); err != nil {
			return nil, err
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		if s.lock != nil {
			s.lock.Close()
		}
		if errors.Is(err, fs.ErrNotExist) && s.readOnly.Load() {
			return s, nil // a read-only file system without the directory: an empty cache that stays empty
		}
		return nil, fmt.Errorf("cache: %w", err)
	}
	s.root = root
	if view {
		return s, nil
	}
	if !s.readOnly.Load() {
		if err := root.MkdirAll(logDir, 0o700); err != nil {
			if isReadOnlyErr(err) {
				s.setReadOnly(err)
			} else {
				log.Warn("cache: cannot create the logs' directory yet", "err", err) // a full disk: retried per write
			}
		}
		s.removeTemps()
	}
	if err := s.loadLogs(); err != nil {
		s.Close()
		return nil, err
	}
	if !s.readOnly.Load() {
		s.migrate()
	}
	return s, nil
}

func (s *Store) takeLock(dir string) error {
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil && isReadOnlyErr(err) {
		s.setReadOnly(err)
		if lock, err = os.Open(filepath.Join(dir, ".lock")); err != nil {
			lock, err = os.Open(dir) // flock works on the directory too
		}
	}
	if err != nil && s.readOnly.Load() && errors.Is(err, fs.ErrNotExist) {
		return nil // nothing there, and nothing will be written
	}
	if err != nil {
		return fmt.Errorf("cache: lock: %w", err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		pid, _ := io.ReadAll(io.LimitReader(lock, 32))
		lock.Close()
		return fmt.Errorf("%w: %s (pid %s)", ErrLocked, dir, strings.TrimSpace(string(pid)))
	}
	if !s.readOnly.Load() {
		_ = lock.Truncate(0)
		_, _ = lock.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	s.lock = lock
	return nil
}

// loadLogs reads every log below .logs.
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
			if l.seg != nil {
				l.seg.release()
			}
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

// Close syncs outstanding writes and releases the lock.
func (s *Store) Close() error {
	err := s.Sync()
	s.mu.Lock()
	for _, l := range s.logs {
		l.mu.Lock()
		if l.seg != nil {
			l.seg.release()
			l.seg = nil
		}
		l.mu.Unlock()
	}
	s.logs = map[string]*rlog{}
	s.mu.Unlock()
	if s.root != nil {
		s.root.Close()
	}
	if s.lock != nil {
		s.lock.Close() // releases the flock
	}
	return err
}

// Path is the cache directory.
func (s *Store) Path() string { return s.path }

// ReadOnly reports whether the cache cannot be written (its file system is read-only, or turned
// so), and why. The cache still answers from what it holds.
func (s *Store) ReadOnly() (bool, string) {
	if !s.readOnly.Load() {
		return false, ""
	}
	if p := s.roErr.Load(); p != nil {
		return true, *p
	}
	return true, "read-only"
}

func (s *Store) setReadOnly(err error) {
	msg := err.Error()
	s.roErr.Store(&msg)
	if !s.readOnly.Swap(true) {
		s.log.Warn("cache: the cache directory cannot be written; answering from what it holds, writing nothing", "dir", s.path, "err", err)
	}
}

// failed notes a failed write: a file system that turned read-only stops all writes.
func (s *Store) failed(err error) {
	if errors.Is(err, unix.EROFS) {
		s.setReadOnly(err)
	}
}

func (s *Store) writable() error {
	if s.readOnly.Load() {
		return ErrReadOnly
	}
	return nil
}

// SetMaxBytes sets --cache-max-bytes: offline changes stay within it (an owner's within an eighth
// of it), and logs are compacted sooner once the files pass it.
func (s *Store) SetMaxBytes(n int64) { s.maxBytes.Store(n) }

// removeTemps deletes the temporary files a crash left (discovery writes, a compaction's file).
func (s *Store) removeTemps() {
	n := 0
	_ = fs.WalkDir(s.root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && d.Name() == quarantineDir {
			return fs.SkipDir
		}
		if !d.IsDir() && (strings.HasPrefix(d.Name(), tmpPrefix) || strings.HasSuffix(d.Name(), ".compact")) {
			if s.root.Remove(p) == nil {
				n++
			}
		}
		return nil
	})
	if n > 0 {
		s.log.Info("cache: removed temporary files left by a crash", "count", n)
	}
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
		if l.seg != nil {
			l.seg.release()
		}
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

// ownerID interns an owner's name.
func (s *Store) ownerID(name string) int32 {
	s.omu.Lock()
	defer s.omu.Unlock()
	if id, ok := s.ownerIDs[name]; ok {
		return id
	}
	id := int32(len(s.owners))
	s.owners = append(s.owners, name)
	s.ownerAt = append(s.ownerAt, 0)
	s.localBytes = append(s.localBytes, 0)
	s.ownerIDs[name] = id
	return id
}

func (s *Store) lookupOwner(name string) (int32, bool) {
	s.omu.Lock()
	defer s.omu.Unlock()
	id, ok := s.ownerIDs[name]
	return id, ok
}

func (s *Store) ownerName(id int32) string {
	s.omu.Lock()
	defer s.omu.Unlock()
	return s.owners[id]
}

func (s *Store) touch(owner int32, at uint32) {
	s.omu.Lock()
	if at > s.ownerAt[owner] {
		s.ownerAt[owner] = at
	}
	s.omu.Unlock()
}

func (s *Store) addLocal(owner int32, n int64) {
	s.omu.Lock()
	s.localBytes[owner] += n
	s.omu.Unlock()
}

func (s *Store) local(owner int32) int64 {
	s.omu.Lock()
	defer s.omu.Unlock()
	return s.localBytes[owner]
}

// Put writes an object. Identical bytes another owner already stored for the same version are not
// written again (a small ref record says this owner holds them too). An offline change (Header.Local)
// past its owner's quota first pushes out that owner's oldest offline changes of the resource, and
// fails with ErrFull when that is not enough.
func (s *Store) Put(k Key, h *Header, body []byte) error {
	if err := k.validate(); err != nil {
		return err
	}
	if len(body) > maxBody {
		return fmt.Errorf("cache: put %s: body of %d bytes: %w", k.Path(), len(body), ErrFull)
	}
	l, err := s.logFor(k.Resource, true)
	if err != nil {
		return fmt.Errorf("cache: put %s: %w", k.Path(), err)
	}
	owner := s.ownerID(k.Owner)
	key := k.ID()
	sc := getScratch()
	defer putScratch(sc)
	sc.plain = h.appendTo(sc.plain[:0])
	hfield, flags, stored := storedForm(sc, sc.plain, body)
	sum := crc32.Update(crc32.Checksum(hfield, crcTable), crcTable, stored)
	l.mu.Lock()
	defer func() {
		if err == nil && l.compactDue() {
			if cerr := l.compact(); cerr != nil {
				s.log.Warn("cache: compaction failed", "log", l.name, "err", cerr)
			}
		}
		l.mu.Unlock()
	}()
	if !h.Local {
		if r := l.shared(key, h.ResourceVersion, sum, hfield, stored); r != nil {
			if l.get(owner, key) == r {
				return nil // already held
			}
			l.buf = refPayload(l.room(), k.Owner, l.s.now(), k.Namespace, k.Name, r.off)
			if err = l.write(l.buf, r); err != nil {
				return err
			}
			return nil
		}
	} else if err = l.makeRoom(owner, k, int64(len(hfield)+len(stored)+frameLen+64)); err != nil {
		return err
	}
	l.buf = putPayload(l.room(), k.Owner, l.s.now(), k.Namespace, k.Name, hfield, flags, stored)
	// The index learns the record's version and checksum from here, not by decoding it again.
	err = l.write(l.buf, &rec{rv: h.ResourceVersion, local: h.Local, sum: sum})
	if cap(l.buf) > 64<<10 {
		l.buf = nil // a large object's buffer goes
	}
	return err
}

// shared finds a record of key another owner holds with the same version and stored bytes.
func (l *rlog) shared(key, rv string, sum uint32, hfield, stored []byte) *rec {
	sl := l.objs[key]
	if sl == nil || rv == "" {
		return nil
	}
	for _, h := range sl.holds {
		r := h.r
		if r.local || r.sum != sum || r.rv != rv {
			continue
		}
		p, err := readRec(l.seg, r.off, r.n)
		if err == nil && string(p.header) == string(hfield) && string(p.body) == string(stored) {
			return r
		}
	}
	return nil
}

// makeRoom keeps an owner's offline changes within its quota, and the cache within
// --cache-max-bytes, by removing that owner's oldest offline changes of the resource.
func (l *rlog) makeRoom(owner int32, k Key, need int64) error {
	quota := int64(DefaultLocalQuota)
	max := l.s.maxBytes.Load()
	if max > 0 {
		quota = max / 8
	}
	if need > quota {
		return fmt.Errorf("cache: offline change of %d bytes is larger than the quota of %d: %w", need, quota, ErrFull)
	}
	var freed int64
	if old := l.get(owner, k.ID()); old != nil && old.refs == 1 {
		freed = int64(old.n) // replaced
	}
	over := func() bool {
		if l.s.local(owner)+need-freed > quota {
			return true
		}
		return max > 0 && l.s.Size()+need-freed > max
	}
	if !over() {
		return nil
	}
	type cand struct {
		key string
		r   *rec
	}
	var cands []cand
	for key, sl := range l.objs {
		if i := sl.find(owner); i >= 0 && sl.holds[i].r.local && key != k.ID() {
			cands = append(cands, cand{key, sl.holds[i].r})
		}
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].r.off < cands[j].r.off })
	for _, c := range cands {
		if !over() {
			break
		}
		ns, name := splitID(c.key)
		l.buf = delPayload(l.room(), k.Owner, l.s.now(), ns, name)
		if err := l.write(l.buf, nil); err != nil {
			return err
		}
	}
	if over() {
		return fmt.Errorf("cache: offline change of %s: %w", k.Path(), ErrFull)
	}
	return nil
}

// Delete removes an object; a missing one is not an error.
func (s *Store) Delete(k Key) error {
	if err := k.validate(); err != nil {
		return err
	}
	l, err := s.logFor(k.Resource, false)
	if l == nil || err != nil {
		return err
	}
	owner, ok := s.lookupOwner(k.Owner)
	if !ok {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.get(owner, k.ID()) == nil {
		return nil
	}
	l.buf = delPayload(l.room(), k.Owner, l.s.now(), k.Namespace, k.Name)
	return l.write(l.buf, nil)
}

// Size is the bytes the cached objects and lists take in the logs (dead records not counted).
func (s *Store) Size() int64 { return s.liveBytes.Load() }

// located is where an owner's record of an object is, taken under the log's lock.
type located struct {
	key string
	off int64
	n   uint32
}

// Get reads and checks an object. A record that fails its check is reported as ErrNotFound
// wrapped with ErrCorrupt, and the resource's lists become incomplete.
func (s *Store) Get(k Key) (*Header, []byte, error) {
	if err := k.validate(); err != nil {
		return nil, nil, err
	}
	l, _ := s.logFor(k.Resource, false)
	owner, ok := s.lookupOwner(k.Owner)
	if l == nil || !ok {
		return nil, nil, ErrNotFound
	}
	l.mu.RLock()
	r := l.get(owner, k.ID())
	if r == nil {
		l.mu.RUnlock()
		return nil, nil, ErrNotFound
	}
	loc := located{off: r.off, n: r.n}
	sg := l.seg.acquire()
	l.mu.RUnlock()
	defer sg.release()
	return l.read(sg, loc)
}

// read reads one object record, marking the lists incomplete when it is corrupt.
func (l *rlog) read(sg *segment, loc located) (*Header, []byte, error) {
	p, err := readRec(sg, loc.off, loc.n)
	if err == nil {
		var hdr, body []byte
		if hdr, body, err = p.open(); err == nil {
			h := &Header{}
			if err = h.unmarshal(hdr); err == nil {
				return h, body, nil
			}
			err = fmt.Errorf("%w: header: %v", ErrCorrupt, err)
		}
	}
	l.s.corrupt.Add(1)
	l.s.log.Warn("cache: a record failed its check and is not served", "log", l.name, "offset", loc.off, "err", err)
	l.mu.Lock()
	l.lose()
	l.mu.Unlock()
	return nil, nil, fmt.Errorf("%w: %w", ErrNotFound, err)
}

// Header reads an object's header.
func (s *Store) Header(k Key) (*Header, error) {
	h, _, err := s.Get(k)
	return h, err
}

// head returns what the index knows of an owner's object without reading it.
func (s *Store) head(k Key) (rv string, local, ok bool) {
	l, _ := s.logFor(k.Resource, false)
	owner, found := s.lookupOwner(k.Owner)
	if l == nil || !found {
		return "", false, false
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	r := l.get(owner, k.ID())
	if r == nil {
		return "", false, false
	}
	return r.rv, r.local, true
}

// Keys calls fn with every object of a resource an owner holds, in one namespace or ("") all of
// them, in namespace/name order.
func (s *Store) Keys(r Resource, namespace string, fn func(Key) error) error {
	for _, loc := range s.locate(r, namespace) {
		ns, name := splitID(loc.key)
		if err := fn(Key{Resource: r, Namespace: ns, Name: name}); err != nil {
			return err
		}
	}
	return nil
}

// locate lists where an owner's objects of a resource are, sorted by namespace and name.
func (s *Store) locate(r Resource, namespace string) []located {
	l, _ := s.logFor(r, false)
	owner, ok := s.lookupOwner(r.Owner)
	if l == nil || !ok {
		return nil
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.locate(owner, namespace)
}

func (l *rlog) locate(owner int32, namespace string) []located {
	var out []located
	for key, sl := range l.objs {
		if namespace != "" {
			ns, _ := splitID(key)
			if ns != namespace {
				continue
			}
		}
		if i := sl.find(owner); i >= 0 {
			out = append(out, located{key: key, off: sl.holds[i].r.off, n: sl.holds[i].r.n})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		ni, mi := splitID(out[i].key)
		nj, mj := splitID(out[j].key)
		if ni != nj {
			return ni < nj
		}
		return mi < mj
	})
	return out
}

// quarantineBytes keeps a corrupt region of a log (up to 1 MiB of it) for a look.
func (s *Store) quarantineBytes(name string, f *os.File, from, to int64) {
	if s.readOnly.Load() {
		return
	}
	n := min(to-from, 1<<20)
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, from); err != nil && !errors.Is(err, io.EOF) {
		return
	}
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if err := s.root.MkdirAll(quarantineDir, 0o700); err != nil {
		return
	}
	dst := filepath.Join(quarantineDir, strconv.FormatInt(time.Now().UnixNano(), 36)+"-"+name+"@"+strconv.FormatInt(from, 10))
	_ = s.root.WriteFile(dst, buf, 0o600)
	s.trimQuarantine()
}

// quarantineFile moves a whole file aside.
func (s *Store) quarantineFile(rel string) {
	if s.readOnly.Load() {
		return
	}
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if err := s.root.MkdirAll(quarantineDir, 0o700); err != nil {
		return
	}
	dst := filepath.Join(quarantineDir, strconv.FormatInt(time.Now().UnixNano(), 36)+"-"+strings.ReplaceAll(filepath.ToSlash(rel), "/", "_"))
	if err := s.root.Rename(rel, dst); err != nil {
		_ = s.root.Remove(rel)
	}
	s.trimQuarantine()
}

func (s *Store) trimQuarantine() {
	entries, err := fs.ReadDir(s.root.FS(), quarantineDir)
	if err == nil && len(entries) > maxQuarantine {
		for _, e := range entries[:len(entries)-maxQuarantine] {
			_ = s.root.Remove(filepath.Join(quarantineDir, e.Name()))
		}
	}
}

// Verify reports how many records the logs hold and how many corrupt records or regions were
// found. Every record is checked when the logs are read at Open, so it reads nothing again.
func (s *Store) Verify(ctx context.Context) (checked, bad int) {
	s.eachLog(func(l *rlog) {
		l.mu.RLock()
		for _, sl := range l.objs {
			checked += len(sl.holds)
		}
		l.mu.RUnlock()
	})
	return checked, int(s.corrupt.Load())
}

// Sync makes everything written so far durable, if anything was written: one fdatasync(2) per log
// appended to since the last sync, an fsync of each small file written (discovery answers) and of
// the directories whose entries changed. Not syncfs(2): that flushes whatever else is dirty on the
// file system (on a gateway, often the root file system: other programs' writes, flushed sooner
// and more often than the kernel would, more flash wear), and what it costs the hub grows with
// what others wrote (measured here, one round a second: syncfs 0.15–0.6 ms of CPU depending on
// what else was being written, the fdatasync 0.24 ms; BenchmarkSyncAfterAWrite).
func (s *Store) Sync() error {
	if !s.dirty.Swap(false) || s.root == nil {
		return nil
	}
	s.syncs.Add(1)
	var errs []error
	s.eachLog(func(l *rlog) {
		l.mu.Lock()
		if !l.unsynced || l.seg == nil {
			l.mu.Unlock()
			return
		}
		l.unsynced = false
		sg := l.seg.acquire()
		l.mu.Unlock()
		defer sg.release()
		if err := unix.Fdatasync(int(sg.f.Fd())); err != nil {
			l.mu.Lock()
			l.unsynced = true
			l.mu.Unlock()
			errs = append(errs, fmt.Errorf("cache: fdatasync %s: %w", l.name, err))
		}
	})
	s.smu.Lock()
	files, dirs := s.unsyncedFiles, s.unsyncedDirs
	s.unsyncedFiles, s.unsyncedDirs = nil, nil
	s.smu.Unlock()
	for rel := range files {
		f, err := s.root.Open(rel)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since
		}
		if err == nil {
			err = f.Sync()
			f.Close()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("cache: fsync %s: %w", rel, err))
			s.unsynced(rel, "")
		}
	}
	for rel := range dirs {
		d, err := s.root.Open(rel)
		if err == nil {
			err = d.Sync()
			d.Close()
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("cache: fsync %s: %w", rel, err))
			s.unsynced("", rel)
		}
	}
	if len(errs) > 0 {
		s.markDirty()
		return errors.Join(errs...)
	}
	return nil
}

// markDirty notes that something was written and wakes RunSync if nothing was waiting before.
func (s *Store) markDirty() {
	if !s.dirty.Swap(true) {
		select {
		case s.dirtied <- struct{}{}:
		default:
		}
	}
}

// unsynced notes a small file (written and renamed into place) or a directory (a file created or
// renamed in it) for the next Sync.
func (s *Store) unsynced(file, dir string) {
	s.smu.Lock()
	defer s.smu.Unlock()
	if file != "" {
		if s.unsyncedFiles == nil {
			s.unsyncedFiles = map[string]bool{}
		}
		s.unsyncedFiles[file] = true
	}
	if dir != "" {
		if s.unsyncedDirs == nil {
			s.unsyncedDirs = map[string]bool{}
		}
		s.unsyncedDirs[dir] = true
	}
}

// syncDir makes a rename in a directory durable.
func (s *Store) syncDir(rel string) {
	if d, err := s.root.Open(rel); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// RunSync syncs what was written at most once per interval until ctx ends, then a last time. It
// sleeps while nothing is written (no timer ticks on an idle hub), and syncs at once when the last
// sync is an interval old (almost: an eighth of it is tolerated), so the sync after the writer's
// batch runs in the same wake-up as the batch.
func (s *Store) RunSync(ctx context.Context, interval time.Duration) {
	var last time.Time
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			_ = s.Sync()
			return
		case <-s.dirtied:
		}
		if wait := time.Until(last.Add(interval)); wait > interval/8 {
			t.Reset(wait)
			select {
			case <-ctx.Done():
				_ = s.Sync()
				return
			case <-t.C:
			}
		}
		last = time.Now()
		if err := s.Sync(); err != nil {
			s.log.Warn("cache: sync failed", "err", err)
		}
	}
}

// Stats are the store's counters since Open.
type Stats struct {
	Syncs int64
	// FilesWritten counts records appended (and discovery files written); BytesWritten their bytes.
	FilesWritten, BytesWritten int64
	// Compactions and CompactedBytes are what compaction rewrote.
	Compactions, CompactedBytes int64
	// Corrupt counts corrupt records and regions found.
	Corrupt int64
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	return Stats{Syncs: s.syncs.Load(), FilesWritten: s.records.Load(), BytesWritten: s.written.Load(),
		Compactions: s.compactions.Load(), CompactedBytes: s.compacted.Load(), Corrupt: s.corrupt.Load()}
}

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
