package cache

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"nodehub/wire"
)

// mountTmpfs mounts a small tmpfs of its own for a test (root only; skipped otherwise).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

func remount(t *testing.T, dir string, flags uintptr) {
	t.Helper()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_REMOUNT|flags, ""); err != nil {
		t.Fatalf("remount %s: %v", dir, err)
	}
}

// watchPods tees a watch stream of pods into the cache as kubelet's.
func watchPods(t *testing.T, m *Manager, events [][]byte) {
	t.Helper()
	var stream []byte
	for _, ev := range events {
		stream = append(stream, ev...)
	}
	respond(t, m, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1&watch=true", "kubelet", stream)
}

func bigPod(t *testing.T, name, rv string, pad int) []byte {
	p := pod(name, "edge-1", rv, nil)
	p.Annotations = map[string]string{"pad": noise(pad)}
	return podJSON(t, p)
}

// noise is n incompressible characters.
func noise(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)[:n]
}

// checkReadable reads every object of kubelet's pods back: each is whole and names itself.
func checkReadable(t *testing.T, s *Store) int {
	t.Helper()
	n := 0
	r := Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}
	s.Keys(r, "", func(k Key) error {
		it, err := s.GetObject(k)
		if err != nil {
			t.Fatalf("%s unreadable: %v", k.ID(), err)
		}
		m, err := wire.ExtractMeta(it.Body, "pods")
		if err != nil || m.Name != k.Name || m.ResourceVersion != it.Header.ResourceVersion {
			t.Fatalf("%s reads back wrong: %v %+v", k.ID(), err, m)
		}
		n++
		return nil
	})
	return n
}

// fullDiskStore opens a store on a tmpfs of size, with a manager whose writer counts the writes
// that failed with ENOSPC in *failures.
func fullDiskStore(t *testing.T, size string) (dir string, s *Store, m *Manager, failures *int) {
	t.Helper()
	dir = mountTmpfs(t, size)
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	m = newManager(s)
	failures = new(int)
	m.Writer.OnError = func(_ Resource, err error) {
		if errors.Is(err, syscall.ENOSPC) {
			*failures++
		}
	}
	return dir, s, m, failures
}

func TestENOSPCMidChurn(t *testing.T) {
	dir, s, m, failures := fullDiskStore(t, "2m")
	respond(t, m, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1", "kubelet",
		listBody(t, "10", pod("a", "edge-1", "1", nil), pod("b", "edge-1", "2", nil)))
	// Churn until the disk is full: every new pod carries 50 KB.
	for round := 0; round < 40 && *failures == 0; round++ {
		var evs [][]byte
		for i := 0; i < 10; i++ {
			rv := fmt.Sprint(100 + round*10 + i)
			evs = append(evs, wire.EncodeJSONWatchEvent(wire.WatchEvent{Type: wire.EventAdded, Object: bigPod(t, fmt.Sprintf("churn-%d-%d", round, i), rv, 50000)}))
		}
		watchPods(t, m, evs)
	}
	if *failures == 0 {
		t.Fatal("the 2 MiB disk never filled: the test proves nothing")
	}
	if ro, _ := s.ReadOnly(); ro {
		t.Fatal("a full disk made the cache read-only for good")
	}
	// Fill what is left: a new resource's log cannot even start, and starts once there is room.
	filler := filepath.Join(dir, "filler")
	f, _ := os.Create(filler)
	for {
		if _, err := f.Write(make([]byte, 4096)); err != nil {
			break
		}
	}
	f.Close()
	cm := Key{Resource: Resource{Owner: "kubelet", Version: "v1", Resource: "configmaps"}, Namespace: "default", Name: "c"}
	if err := s.Put(cm, &Header{Name: "c", Namespace: "default", ResourceVersion: "1"}, []byte("{}")); err == nil {
		t.Fatal("a write to a full disk succeeded")
	}
	os.Remove(filler)
	if err := s.Put(cm, &Header{Name: "c", Namespace: "default", ResourceVersion: "1"}, []byte("{}")); err != nil {
		t.Fatalf("the cache does not write again once there is room: %v", err)
	}
	// Still served, nothing torn, and the pod list no longer claims to be whole.
	if n := checkReadable(t, s); n < 2 {
		t.Fatalf("only %d pods readable after ENOSPC", n)
	}
	if _, res := names(t, s, "kubelet", "", "", "spec.nodeName=edge-1"); !res.Partial {
		t.Fatal("a pod list that lost writes to ENOSPC reads complete")
	}
	s.Close()

	s, err := Open(dir, nil)
	if err != nil {
		t.Fatalf("reopen after ENOSPC: %v", err)
	}
	defer s.Close()
	checkReadable(t, s)
	if s.Stats().Corrupt != 0 {
		t.Fatal("ENOSPC left a corrupt record")
	}
	if _, res := names(t, s, "kubelet", "", "", "spec.nodeName=edge-1"); !res.Partial {
		// The incomplete mark may itself have failed to be written: then the log is a prefix of
		// what was written before the first failure, and the list as it was then is whole.
		if n := checkReadable(t, s); n == 0 {
			t.Fatal("reopened list lost its pods")
		}
	}
}

func TestReadOnlyFileSystem(t *testing.T) {
	dir := mountTmpfs(t, "4m")
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := newManager(s)
	respond(t, m, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1", "kubelet",
		listBody(t, "10", pod("a", "edge-1", "1", nil), pod("b", "edge-1", "2", nil)))
	s.Close()

	// The card turned read-only while the hub was down: it starts anyway and answers.
	remount(t, dir, unix.MS_RDONLY)
	s, err = Open(dir, nil)
	if err != nil {
		t.Fatalf("a read-only cache stopped the start: %v", err)
	}
	if ro, why := s.ReadOnly(); !ro || why == "" {
		t.Fatal("read-only not reported")
	}
	got, res := names(t, s, "kubelet", "", "", "spec.nodeName=edge-1")
	if strings.Join(got, ",") != "a,b" || res.Partial {
		t.Fatalf("read-only cache answers %v %+v", got, res)
	}
	k := Key{Resource: Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}, Namespace: "default", Name: "c"}
	if err := s.Put(k, &Header{Name: "c", Namespace: "default"}, []byte("{}")); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("a write to a read-only cache: %v", err)
	}
	m = newManager(s)
	respond(t, m, "GET", "/api/v1/namespaces/default/pods/c", "kubelet", podJSON(t, pod("c", "edge-1", "3", nil)))
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	remount(t, dir, 0)

	// A file system that turns read-only under a running hub (EROFS from every write).
	s, err = Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.hook = func(string) error { return syscall.EROFS }
	if err := s.Put(k, &Header{Name: "c", Namespace: "default"}, []byte("{}")); err == nil {
		t.Fatal("a write on a read-only file system succeeded")
	}
	s.hook = nil
	if ro, _ := s.ReadOnly(); !ro {
		t.Fatal("EROFS did not make the cache read-only")
	}
	if err := s.Put(k, &Header{Name: "c", Namespace: "default"}, []byte("{}")); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("writes go on after EROFS: %v", err)
	}
	if got, res := names(t, s, "kubelet", "", "", "spec.nodeName=edge-1"); strings.Join(got, ",") != "a,b" || !res.Partial {
		t.Fatalf("after EROFS: %v %+v (a lost write makes the list incomplete)", got, res)
	}
}

func TestReadOnlyFileSystemWithoutTheDirectory(t *testing.T) {
	dir := mountTmpfs(t, "1m")
	remount(t, dir, unix.MS_RDONLY)
	s, err := Open(filepath.Join(dir, "cache"), nil)
	if err != nil {
		t.Fatalf("a read-only file system without the cache stopped the start: %v", err)
	}
	defer s.Close()
	if ro, _ := s.ReadOnly(); !ro {
		t.Fatal("read-only not reported")
	}
	if got, _ := names(t, s, "kubelet", "", "", ""); len(got) != 0 {
		t.Fatalf("an empty read-only cache answers %v", got)
	}
}

func TestCorruptLogHeaderIsSetAside(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, logDir), 0o700)
	os.WriteFile(filepath.Join(dir, logDir, "pods.v1.core.log"), []byte("garbage, not a log at all"), 0o600)
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	k := Key{Resource: Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}, Namespace: "default", Name: "p"}
	if err := s.Put(k, &Header{Name: "p", Namespace: "default", ResourceVersion: "1"}, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if q, _ := os.ReadDir(filepath.Join(dir, quarantineDir)); len(q) != 1 {
		t.Fatalf("%d files in quarantine", len(q))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if n, _ := s.Verify(ctx); n != 1 {
		t.Fatalf("%d objects after setting a bad log aside", n)
	}
}

// A write that fails inside a re-list (ENOSPC on a real tmpfs: pod d does not fit, the small
// list record still does) leaves the list incomplete, also after a restart: kubelet must never
// be answered [a, b] as its whole pod list and kill d (issue 23).
func TestENOSPCInsideARelistLeavesTheListIncomplete(t *testing.T) {
	dir, s, m, failures := fullDiskStore(t, "1m")
	const url = "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1"
	respond(t, m, "GET", url, "kubelet", listBody(t, "10", pod("a", "edge-1", "1", nil), pod("b", "edge-1", "2", nil)))
	if _, res := names(t, s, "kubelet", "", "", "spec.nodeName=edge-1"); res.Partial {
		t.Fatal("the first list reads partial")
	}
	// Leave 64 KiB free.
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * st.Bsize
	if err := os.WriteFile(filepath.Join(dir, "filler"), make([]byte, free-64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	d := pod("d", "edge-1", "12", nil)
	d.Annotations = map[string]string{"pad": noise(300 << 10)}
	respond(t, m, "GET", url, "kubelet", listBody(t, "20", pod("a", "edge-1", "1", nil), pod("b", "edge-1", "2", nil), d))
	if *failures == 0 {
		t.Fatal("pod d's write did not fail: the test proves nothing")
	}
	got, res := names(t, s, "kubelet", "", "", "spec.nodeName=edge-1")
	if !res.Partial {
		t.Fatalf("a re-list whose write of d failed reads complete: %v", got)
	}
	if res.Record == nil || res.Record.ResourceVersion != "20" {
		t.Fatalf("the re-list was not recorded (the test wants the small record to fit): %+v", res.Record)
	}
	s = reopen(t, s)
	if got, res := names(t, s, "kubelet", "", "", "spec.nodeName=edge-1"); !res.Partial {
		t.Fatalf("after a restart, the re-list that lost d reads complete: %v", got)
	}
}

// A list record that names an object that is not held (a write lost before this fix, or any way
// a record and its objects part) is not read as whole; one whose objects were deleted since is.
func TestListRecordNamingAMissingObjectReadsPartial(t *testing.T) {
	s := openStore(t)
	m := newManager(s)
	const url = "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1"
	respond(t, m, "GET", url, "kubelet", listBody(t, "10", pod("a", "edge-1", "1", nil), pod("b", "edge-1", "2", nil)))
	r := Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}
	if err := s.PutList(r, ListRecord{FieldSelector: "spec.nodeName=edge-1", ResourceVersion: "11", Complete: true, Keys: []string{"default/a", "default/b", "default/d"}}); err != nil {
		t.Fatal(err)
	}
	if got, res := names(t, s, "kubelet", "", "", "spec.nodeName=edge-1"); !res.Partial {
		t.Fatalf("a record naming a, b, d with only a, b held reads complete: %v", got)
	}
	if err := s.PutList(r, ListRecord{FieldSelector: "spec.nodeName=edge-1", ResourceVersion: "12", Complete: true, Keys: []string{"default/a", "default/b"}}); err != nil {
		t.Fatal(err)
	}
	// b deleted by a watch: the list is still whole, before and after a restart.
	watchPods(t, m, [][]byte{wire.EncodeJSONWatchEvent(wire.WatchEvent{Type: wire.EventDeleted, Object: podJSON(t, pod("b", "edge-1", "13", nil))})})
	if got, res := names(t, s, "kubelet", "", "", "spec.nodeName=edge-1"); res.Partial || len(got) != 1 {
		t.Fatalf("after b's deletion: %v partial %v", got, res.Partial)
	}
	s2 := reopen(t, s)
	if got, res := names(t, s2, "kubelet", "", "", "spec.nodeName=edge-1"); res.Partial || len(got) != 1 {
		t.Fatalf("after b's deletion and a restart: %v partial %v", got, res.Partial)
	}
}
