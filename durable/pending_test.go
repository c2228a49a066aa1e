package durable

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func openRoot(t *testing.T, dir string) *os.Root {
	t.Helper()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return root
}

// A file written as a stream replaces the old one only at Commit: until then (a crash leaves the
// same) the old file is whole and the new bytes are in a temporary file; Commit hands back the new
// file, open, with the data at its place.
func TestPendingReplacesAtCommit(t *testing.T) {
	dir := t.TempDir()
	root := openRoot(t, dir)
	path := filepath.Join(dir, "logs", "a.log")
	if err := WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := CreateIn(root, "logs/a.log", 0o600)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"new ", "in ", "parts"} {
		if _, err := p.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Fatalf("before Commit the file is %q, want the old one", b)
	}
	got := names(t, filepath.Join(dir, "logs"))
	if len(got) != 2 || !strings.HasPrefix(got[0], TempPrefix) || got[1] != "a.log" {
		t.Fatalf("before Commit the directory holds %v, want the old file and a temporary one", got)
	}
	f, err := p.Commit()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p.Cleanup() // after Commit: nothing
	if b, _ := os.ReadFile(path); string(b) != "new in parts" {
		t.Fatalf("after Commit the file is %q", b)
	}
	buf := make([]byte, 5)
	if _, err := f.ReadAt(buf, 7); err != nil || string(buf) != "parts" {
		t.Fatalf("the committed file reads %q %v", buf, err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode().Perm())
	}
	if got := names(t, filepath.Join(dir, "logs")); !slices.Equal(got, []string{"a.log"}) {
		t.Fatalf("after Commit the directory holds %v", got)
	}
}

// Cleanup before Commit (a failed stream) leaves the old file and no temporary one.
func TestPendingCleanupLeavesTheOldFile(t *testing.T) {
	dir := t.TempDir()
	if err := WriteFile(filepath.Join(dir, "a"), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := CreateIn(openRoot(t, dir), "a", 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Write([]byte("lost")); err != nil {
		t.Fatal(err)
	}
	p.Cleanup()
	if _, err := p.Commit(); err == nil {
		t.Fatal("Commit after Cleanup succeeded")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a")); string(b) != "old" {
		t.Fatalf("the file is %q", b)
	}
	if got := names(t, dir); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("the directory holds %v", got)
	}
}

// A directory that cannot be fsynced fails the Commit (ErrDirNotSynced), which still hands back
// the file, in place.
func TestPendingReturnsTheDirectorySyncError(t *testing.T) {
	dir := t.TempDir()
	p, err := CreateIn(openRoot(t, dir), "a", 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Write([]byte("new")); err != nil {
		t.Fatal(err)
	}
	eio := errors.New("injected EIO")
	p.fsyncDir = func(*os.File) error { return eio }
	f, err := p.Commit()
	if !errors.Is(err, ErrDirNotSynced) || !errors.Is(err, eio) {
		t.Fatalf("Commit returned %v, want the directory's sync error", err)
	}
	if f == nil {
		t.Fatal("no file with the directory's sync error")
	}
	f.Close()
	if b, _ := os.ReadFile(filepath.Join(dir, "a")); string(b) != "new" {
		t.Fatalf("the file is %q", b)
	}
}
