package cache

import (
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
)

// disk is the cache directory as the log engine sees it: where the files are, whether they can be
// written, what the next Sync makes durable, what was written (the counters), and where corrupt
// regions are kept. It knows nothing of owners, objects or lists.
type disk struct {
	root *os.Root
	path string
	log  *slog.Logger

	readOnly atomic.Bool
	roErr    atomic.Pointer[string]

	fileBytes atomic.Int64 // every log's file
	pending                // what the next Sync makes durable (sync.go)
	counters               // what Stats reports (stats.go)

	// hook, when set (tests), runs before every record is appended; an error fails the write.
	hook func(rel string) error
}

// removeTemps deletes the temporary files a crash left (durable's: discovery writes, a
// compaction's file; ".compact", a compaction's file before it went through durable).
func (d *disk) removeTemps() {
	n := 0
	_ = fs.WalkDir(d.root.FS(), ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if e.IsDir() && e.Name() == quarantineDir {
			return fs.SkipDir
		}
		if !e.IsDir() && (strings.HasPrefix(e.Name(), tmpPrefix) || strings.HasSuffix(e.Name(), ".compact")) {
			if d.root.Remove(p) == nil {
				n++
			}
		}
		return nil
	})
	if n > 0 {
		d.log.Info("cache: removed temporary files left by a crash", "count", n)
	}
}
