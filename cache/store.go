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
// written, one fdatasync(2) of each log appended to (and an fsync of each directory whose entries
// changed), not one fsync per object, because flash wears with every flush. A discovery file,
// written only when its answer changes, is replaced whole and made durable as it is written
// (package durable, which also says why a sync is never syncfs(2)). A kill -9 loses nothing
// written (the page cache keeps it); a power cut loses at most the writes of the last interval.
// Every record carries a CRC-32C keyed by the log's random salt (no object's bytes can hold a
// record that passes it, frame.go): at start a log is read record by
// record, and a record that fails its frame or checksum is never applied. At the tail it is a write
// the crash cut short, and the log is cut there, so what remains is a prefix of what was written: a
// consistent, older state, with the lists as they were then. A bad region followed by good records
// that chain to the end of the file is corruption: it is skipped, copied to .quarantine, and every
// list of that resource is marked incomplete until it is listed again (the kubelet is not answered
// a partial pod list as if whole).
// A record is checked again every time it is read, so a torn or rotten one is never served.
//
// A failed write (ENOSPC, EIO) is cut back off the file, marks the resource's lists incomplete in
// memory at once and on disk before the next record of that resource. Compaction writes a new file,
// fsyncs it, renames it over the old one and fsyncs the directory: a crash leaves the old log or
// the new one. A read-only cache file system does not stop the hub: the logs are read, nothing is
// written, and ReadOnly says so.
//
// # The code
//
// Two layers. The log engine knows a record as bytes: the disk (disk.go: the directory, whether it
// can be written, what the next Sync makes durable, the counters; quarantine.go, readonly.go,
// smallfile.go) and the log file on it (logfile.go: open, append, read; logscan.go: the scan at
// open and the torn tail; resync.go, crcshift.go: the resync, bounded whatever the bytes are;
// logrewrite.go: compaction's new file; frame.go: the file header, the salt and the frames). The cache's meaning is above it: each resource's index of who
// holds which object and list (rlog.go, index.go, append.go, compact.go: what is live), the
// payloads (record.go), the owners (owners.go), the quotas (quota.go), the write budget of bytes a
// minute (budget.go; unchanged.go: what changes nothing is not written), reads (get.go, reader.go),
// writes (put.go, lists.go, writer.go, stream.go), GC (gc.go) and the Store that holds the logs
// (store.go, logs.go, sync.go, stats.go, dir.go). Old layouts are brought in once: migrate.go (one
// file per object, nodehub's first and YurtHub's) and upgrade.go (version 1 logs, without a salt).
package cache

import (
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"nodehub/durable"
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
	tmpPrefix = durable.TempPrefix
	logDir    = ".logs"
	logSuffix = ".log"
)

// Store is the cache under one directory. Safe for concurrent use.
//
// It is two layers: the disk (the directory, its files and what was written to them: disk.go) with
// the log engine on it (logFile: records, frames, checksums, compaction's rewrite, the torn tail and
// the quarantine), and the cache's meaning above them: each resource's index of who holds which
// object and list (rlog), the owners, the quotas and what a read or a write means.
type Store struct {
	disk
	lock *os.File

	mu   sync.Mutex // logs
	logs map[string]*rlog

	owners    ownerTable
	liveBytes atomic.Int64 // live records of every log
	maxBytes  atomic.Int64
	budget    budget // bytes offline changes may write a minute (budget.go)

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
	s := &Store{disk: disk{path: dir, log: log, pending: pending{dirtied: make(chan struct{}, 1)}}, logs: map[string]*rlog{}}
	if view {
		s.readOnly.Store(true)
	}
	if err := s.openDir(dir, view); err != nil {
		return nil, err
	}
	if view || s.root == nil {
		return s, nil // a view reads its logs itself; a read-only file system without the directory: an empty cache that stays empty
	}
	if !s.readOnly.Load() {
		if err := s.root.MkdirAll(logDir, 0o700); err != nil {
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

// Close syncs outstanding writes and releases the lock.
func (s *Store) Close() error {
	err := s.Sync()
	s.mu.Lock()
	for _, l := range s.logs {
		l.mu.Lock()
		l.close()
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

// SetMaxBytes sets --cache-max-bytes: offline changes stay within it (an owner's within an eighth
// of it), and logs are compacted sooner once the files pass it.
func (s *Store) SetMaxBytes(n int64) { s.maxBytes.Store(n) }

// now is the time records are stamped with (Unix seconds).
func (s *Store) now() uint32 {
	if s.clock != nil {
		return uint32(s.clock().Unix())
	}
	return uint32(time.Now().Unix())
}

// Size is the bytes the cached objects and lists take in the logs (dead records not counted).
func (s *Store) Size() int64 { return s.liveBytes.Load() }
