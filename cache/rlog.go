package cache

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
)

// rlog is one resource's log (every owner's objects of one resource.version.group) and its index:
// where the record of each object each owner holds is, never the objects themselves.
type rlog struct {
	s    *Store
	name string // resource.version.group

	mu    sync.RWMutex
	seg   *segment
	end   int64 // where the next record goes
	live  int64 // bytes of records still needed (the rest is dead, reclaimed by compaction)
	objs  map[string]*slot
	lists map[listKey]*listState
	// metaDue: objects were lost (a failed write, corruption) and the lists, already incomplete in
	// memory, are not yet recorded so on disk: the next append records that first.
	metaDue bool
	// unopened: while loading, a put record whose object could not be opened was not applied.
	unopened bool
	// unsynced: records were appended since the last Sync.
	unsynced bool
	buf      []byte
	byOff    map[int64]*rec // while loading: put records by offset, for ref records
}

// segment is an open log file; readers hold a reference so compaction can swap files under them.
type segment struct {
	f    *os.File
	refs atomic.Int32
	seed uint32 // the checksum's seed from the file's salt (0: a version 1 log, unsalted)
	hdr  int64  // the file header's length
}

func (sg *segment) acquire() *segment { sg.refs.Add(1); return sg }
func (sg *segment) release() {
	if sg.refs.Add(-1) == 0 {
		sg.f.Close()
	}
}

func (l *rlog) path() string { return filepath.Join(logDir, l.name+logSuffix) }

func newRlog(s *Store, name string) *rlog {
	return &rlog{s: s, name: name, objs: map[string]*slot{}, lists: map[listKey]*listState{}}
}

// open opens (creating it when writable) and loads the log file.
func (l *rlog) open() error {
	flag := os.O_RDWR | os.O_CREATE
	if l.s.readOnly.Load() {
		flag = os.O_RDONLY
	}
	f, err := l.s.root.OpenFile(l.path(), flag, 0o600)
	if err != nil && flag != os.O_RDONLY && isReadOnlyErr(err) {
		l.s.setReadOnly(err)
		f, err = l.s.root.OpenFile(l.path(), os.O_RDONLY, 0)
	}
	if err != nil {
		return fmt.Errorf("cache: open %s: %w", l.path(), err)
	}
	l.seg = &segment{f: f}
	l.seg.refs.Store(1)
	if err := l.load(); err != nil {
		return err
	}
	l.upgrade()
	return nil
}

// room returns the log's record buffer, emptied, with room for a frame.
func (l *rlog) room() []byte {
	if cap(l.buf) < frameLen {
		l.buf = make([]byte, frameLen, 4096)
	}
	return l.buf[:frameLen]
}
