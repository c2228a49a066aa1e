package cache

import (
	"context"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Sync makes each log written since the last sync durable once; with nothing written it does
// nothing, and RunSync neither syncs nor wakes while nothing is written.
func TestSyncOnlyWhatWasWrittenAndOnlyWhenWritten(t *testing.T) {
	s := openStore(t)
	if err := s.Sync(); err != nil || s.Stats().Syncs != 0 {
		t.Fatalf("a sync with nothing written: %v, %d syncs", err, s.Stats().Syncs)
	}
	slicePut(t, s, "kube-proxy", "a", "5", 500)
	if err := s.PutDiscovery("/api", "application/json", "application/json", []byte(`{"kind":"APIVersions"}`)); err != nil {
		t.Fatal(err)
	}
	l, _ := s.logFor(Resource{Owner: "kube-proxy", Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}, false)
	// The log waits for the sync; the discovery file was made durable as it was written.
	if !l.unsynced || !s.unsyncedDirs[logDir] || len(s.unsyncedDirs) != 1 {
		t.Fatalf("not noted for the sync: log %v, dirs %v", l.unsynced, s.unsyncedDirs)
	}
	if err := s.Sync(); err != nil || s.Stats().Syncs != 1 {
		t.Fatalf("sync: %v, %d syncs", err, s.Stats().Syncs)
	}
	if l.unsynced || len(s.unsyncedDirs) != 0 {
		t.Fatalf("left for the next sync: log %v, dirs %v", l.unsynced, s.unsyncedDirs)
	}
	if err := s.Sync(); err != nil || s.Stats().Syncs != 1 {
		t.Fatalf("a second sync with nothing new: %v, %d syncs", err, s.Stats().Syncs)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.RunSync(ctx, 100*time.Millisecond); close(done) }()
	time.Sleep(300 * time.Millisecond)
	if n := s.Stats().Syncs; n != 1 {
		t.Fatalf("RunSync synced %d times with nothing written", n-1)
	}
	slicePut(t, s, "kube-proxy", "a", "6", 500)
	deadline := time.Now().Add(30 * time.Second)
	for s.Stats().Syncs != 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := s.Stats().Syncs; n != 2 {
		t.Fatalf("RunSync after a write: %d syncs, want 2", n)
	}
	// Writes in quick succession are synced together, at most once per interval (less an eighth):
	// the bound is counted from the time the writes really took, however loaded the machine.
	start := time.Now()
	for i := 0; i < 20; i++ {
		slicePut(t, s, "kube-proxy", "a", "7"+string(rune('0'+i%10)), 500)
		time.Sleep(10 * time.Millisecond)
	}
	unsynced := func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.unsynced
	}
	for deadline := time.Now().Add(10 * time.Second); unsynced() && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
	}
	elapsed := time.Since(start)
	if n, most := s.Stats().Syncs-2, int64(elapsed/(100*time.Millisecond*7/8))+1; n < 1 || n > most {
		t.Fatalf("20 writes over %v with a 100 ms interval: %d syncs, want 1 to %d", elapsed.Round(time.Millisecond), n, most)
	}
	cancel()
	<-done
	if l.unsynced {
		t.Fatal("RunSync ended without a last sync")
	}
}

// BenchmarkSyncAfterAWrite is the CPU one sync round costs the hub after a watch event's record
// was appended (cpu-ns/sync, user + system): the store's fdatasync of the log written, beside the
// syncfs of the whole file system it replaced. Rounds are 200 ms apart, as the hub's are (one per
// sync interval): what else was written on the file system meanwhile is what syncfs pays for.
func BenchmarkSyncAfterAWrite(b *testing.B) {
	for _, how := range []string{"fdatasync", "syncfs"} {
		b.Run(how, func(b *testing.B) {
			s, err := Open(b.TempDir(), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var cpu time.Duration
			for i := 0; i < b.N; i++ {
				time.Sleep(200 * time.Millisecond)
				k := Key{Resource: Resource{Owner: "nodehub", Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}, Namespace: "ns", Name: "a"}
				rv := strconv.Itoa(i + 1)
				if err := s.Put(k, &Header{ContentType: "application/json", Name: "a", Namespace: "ns", ResourceVersion: rv}, []byte(`{"metadata":{"resourceVersion":"`+rv+`"}}`)); err != nil {
					b.Fatal(err)
				}
				c0 := processCPU()
				if how == "syncfs" {
					s.dirty.Store(false)
					err = unix.Syncfs(int(s.lock.Fd()))
				} else {
					err = s.Sync()
				}
				cpu += processCPU() - c0
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/sync")
		})
	}
}

func processCPU() time.Duration {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
