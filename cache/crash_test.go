package cache

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
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

// crashChild writes objects as fast as it can until it is killed. Every body names its own key and
// version, so a file that reads back valid but holds the wrong bytes would be caught.
func crashChild(dir string) {
	s, err := Open(dir, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	r := Resource{Owner: "kubelet", Version: "v1", Resource: "configmaps"}
	for i := 0; ; i++ {
		name := fmt.Sprintf("cm-%d", i%17)
		rv := fmt.Sprint(time.Now().UnixNano())
		body := fmt.Sprintf(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":%q,"namespace":"ns","resourceVersion":%q},"data":{"pad":%q}}`,
			name, rv, strings.Repeat("x", rand.IntN(20000)))
		h := Header{ContentType: wire.MediaJSON, Name: name, Namespace: "ns", ResourceVersion: rv}
		if err := s.Put(Key{Resource: r, Namespace: "ns", Name: name}, &h, []byte(body)); err != nil {
			os.Exit(4)
		}
		if i%50 == 0 {
			_ = s.Sync()
		}
	}
}

func TestKilledWriterNeverLeavesAValidButWrongFile(t *testing.T) {
	if testing.Short() {
		t.Skip("crash loop")
	}
	dir := t.TempDir()
	rounds := 200
	for round := 0; round < rounds; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(2+rand.IntN(25)) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 3 || ee.ExitCode() == 4 {
			t.Fatalf("round %d: child did not die by the signal: %v", round, err)
		}
		checkStore(t, dir, round)
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

func checkStore(t *testing.T, dir string, round int) {
	t.Helper()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatalf("round %d: reopen: %v", round, err)
	}
	defer s.Close()
	entries, _ := os.ReadDir(dir + "/" + logDir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".compact") {
			t.Fatalf("round %d: compaction's temporary file %s survived Open", round, e.Name())
		}
	}
	r := Resource{Owner: "kubelet", Version: "v1", Resource: "configmaps"}
	_ = s.Keys(r, "ns", func(k Key) error {
		it, err := s.GetObject(k)
		if err != nil {
			t.Fatalf("round %d: %s unreadable after a kill (rename must be atomic): %v", round, k.Name, err)
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
