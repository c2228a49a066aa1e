package cache

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"nodehub/wire"
)

const crashChildEnv = "NODEHUB_CACHE_CRASH_CHILD"

// TestMain lets the test binary play the writer that gets killed.
func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir)
		return
	}
	os.Exit(m.Run())
}

// crashChild writes objects as fast as it can until it is killed: puts of two owners (the second
// mostly refs of the first's bytes), deletes, and enough churn that logs are compacted. Every body
// names its own key and version, so a record that reads back valid but holds the wrong bytes would
// be caught. After each Sync it prints the index of the last write the sync covered.
func crashChild(dir string) {
	s, err := Open(dir, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	round, _ := strconv.Atoi(os.Getenv(crashRoundEnv))
	r := Resource{Owner: "kubelet", Version: "v1", Resource: "configmaps"}
	r2 := r
	r2.Owner = "kube-proxy"
	for i := 0; ; i++ {
		name := fmt.Sprintf("cm-%d", i%17)
		rv := fmt.Sprint(round*10_000_000 + i)
		body := fmt.Sprintf(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":%q,"namespace":"ns","resourceVersion":%q},"data":{"pad":%q}}`,
			name, rv, strings.Repeat("x", rand.IntN(20000)))
		h := Header{ContentType: wire.MediaJSON, Name: name, Namespace: "ns", ResourceVersion: rv}
		k := Key{Resource: r, Namespace: "ns", Name: name}
		if err := s.Put(k, &h, []byte(body)); err != nil {
			os.Exit(4)
		}
		k.Resource = r2
		if i%5 == 0 {
			_ = s.Delete(k)
		} else if err := s.Put(k, &h, []byte(body)); err != nil {
			os.Exit(4)
		}
		if i%50 == 0 {
			if s.Sync() == nil {
				fmt.Printf("synced %d\n", i)
			}
		}
	}
}

const crashRoundEnv = "NODEHUB_CACHE_CRASH_ROUND"

func TestKilledWriterNeverLeavesAValidButWrongFile(t *testing.T) {
	if testing.Short() {
		t.Skip("crash loop")
	}
	dir := t.TempDir()
	rounds := 150
	for round := 0; round < rounds; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, crashRoundEnv+"="+strconv.Itoa(round))
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// The kill waits on the child's progress, not on the clock: the child has synced at least
		// write 0, 50 or 100 (chosen at random) before a random few milliseconds more, so every
		// round writes something however loaded the machine is, and some rounds write every key.
		synced := -1
		readSynced := func(l string) {
			if n, ok := strings.CutPrefix(l, "synced "); ok {
				synced, _ = strconv.Atoi(n)
			}
		}
		for target := 50 * rand.IntN(3); synced < target; {
			l, ok := <-lines
			if !ok {
				break
			}
			readSynced(l)
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		for l := range lines {
			readSynced(l)
		}
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 3 || ee.ExitCode() == 4 {
			t.Fatalf("round %d: child did not die by the signal: %v", round, err)
		}
		checkStore(t, dir, round, synced)
	}
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n := 0
	s.Keys(Resource{Owner: "kubelet", Version: "v1", Resource: "configmaps"}, "ns", func(Key) error { n++; return nil })
	if n < 10 || s.Stats().Corrupt != 0 {
		t.Fatalf("the killed writers wrote only %d objects (%d corrupt): the test proved nothing", n, s.Stats().Corrupt)
	}
}

// checkStore reopens the cache a killed writer left: every object reads back whole and right, and
// none is older than the last write the last completed sync covered.
func checkStore(t *testing.T, dir string, round, synced int) {
	t.Helper()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatalf("round %d: reopen: %v", round, err)
	}
	defer s.Close()
	entries, _ := os.ReadDir(dir + "/" + logDir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tmpPrefix) || strings.HasSuffix(e.Name(), ".compact") {
			t.Fatalf("round %d: compaction's temporary file %s survived Open", round, e.Name())
		}
	}
	if s.Stats().Corrupt != 0 {
		t.Fatalf("round %d: a kill left corruption (a torn tail is not)", round)
	}
	for _, owner := range []string{"kubelet", "kube-proxy"} {
		r := Resource{Owner: owner, Version: "v1", Resource: "configmaps"}
		_ = s.Keys(r, "ns", func(k Key) error {
			it, err := s.GetObject(k)
			if err != nil {
				t.Fatalf("round %d: %s/%s unreadable after a kill: %v", round, owner, k.Name, err)
			}
			var obj struct {
				Metadata struct{ Name, ResourceVersion string } `json:"metadata"`
			}
			if err := json.Unmarshal(it.Body, &obj); err != nil || obj.Metadata.Name != k.Name || obj.Metadata.ResourceVersion != it.Header.ResourceVersion {
				t.Fatalf("round %d: %s reads back valid but wrong: %v %+v", round, k.Name, err, obj.Metadata)
			}
			return nil
		})
	}
	if synced < 0 {
		return
	}
	// kubelet's cm-j was last written, up to the synced write, at the largest i ≤ synced with
	// i%17 == j: what is stored must be that write or a later one.
	r := Resource{Owner: "kubelet", Version: "v1", Resource: "configmaps"}
	for j := 0; j < 17 && j <= synced; j++ {
		want := synced - ((synced - j) % 17)
		k := Key{Resource: r, Namespace: "ns", Name: fmt.Sprintf("cm-%d", j)}
		it, err := s.GetObject(k)
		if err != nil {
			t.Fatalf("round %d: %s, synced at write %d, lost: %v", round, k.Name, want, err)
		}
		got, _ := strconv.Atoi(it.Header.ResourceVersion)
		if got < round*10_000_000+want {
			t.Fatalf("round %d: %s is at write %d, older than the synced write %d", round, k.Name, got-round*10_000_000, want)
		}
	}
}
