package cache

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkResyncFrameHeads: the resync over 96 MiB of frame heads (one every 20 bytes, each
// announcing a record that fits in the rest of the file), then 1 MiB of records.
func BenchmarkResyncFrameHeads(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	file := append(make([]byte, logHeaderLen), plantHeads(rng, 96<<20, 20, 1<<20)...)
	for len(file) < 97<<20 {
		file = append(file, frame(make([]byte, 1000), 7)...)
	}
	path := filepath.Join(b.TempDir(), "log")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		b.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	l := &logFile{seg: &segment{f: f, seed: 7, hdr: logHeaderLen}}
	b.SetBytes(int64(len(file)))
	for b.Loop() {
		rz := l.newResyncer(logHeaderLen, int64(len(file)), resyncBatch)
		if at, _ := rz.resync(logHeaderLen); at < 0 {
			b.Fatal("no resync point")
		}
	}
}
