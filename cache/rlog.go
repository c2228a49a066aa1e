package cache

import (
	"sync"
)

// rlog is one resource's log (every owner's objects of one resource.version.group): the log file
// (logFile, the engine) and the index, where the record of each object each owner holds is, never
// the objects themselves. Its mu serialises the file's appends and rewrites and guards the index.
type rlog struct {
	logFile
	s *Store

	mu    sync.RWMutex
	live  int64 // bytes of records still needed (the rest is dead, reclaimed by compaction)
	objs  map[string]*slot
	lists map[listKey]*listState
	// metaDue: objects were lost (a failed write, corruption) and the lists, already incomplete in
	// memory, are not yet recorded so on disk: the next append records that first.
	metaDue bool
	// unopened: while loading, a put record whose object could not be opened was not applied.
	unopened bool
	buf      []byte
	byOff    map[int64]*rec // while loading: put records by offset, for ref records
	hdrBuf   []byte         // what a record's header is decoded into to index it (l.mu)
}

func newRlog(s *Store, name string) *rlog {
	return &rlog{logFile: logFile{d: &s.disk, name: name}, s: s, objs: map[string]*slot{}, lists: map[listKey]*listState{}}
}

// open opens (creating it when writable) and loads the log file.
func (l *rlog) open() error {
	if err := l.openFile(); err != nil {
		return err
	}
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

// load reads every record, rebuilding the index. A torn tail is cut off (when writable); a bad
// region followed by good records is skipped and kept in .quarantine.
func (l *rlog) load() error {
	size, err := l.fileSize()
	if err != nil {
		return err
	}
	if started, err := l.readHeader(size); started || err != nil {
		return err
	}
	l.byOff = map[int64]*rec{}
	defer func() { l.byOff, l.hdrBuf = nil, nil }()
	l.unopened = false
	size, lost := l.scan(size, func(off int64, n uint32, b []byte) bool {
		p, err := decodePayload(b)
		if err != nil {
			return false // taken as corruption: a checksum that holds over what is no record
		}
		l.apply(off, n, p, nil)
		return true
	})
	l.setEnd(size)
	if lost || l.unopened { // objects were lost: no list read back is whole, whenever it was recorded
		l.lose()
	}
	return nil
}
