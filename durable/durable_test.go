package durable

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func TestWriteFileReplacesWithPermAndLeavesNoTemporaryFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	path := filepath.Join(dir, "x.pem")
	for _, content := range []string{"one", "two"} {
		if err := WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil || string(b) != content {
			t.Fatalf("read %q %v, want %q", b, err, content)
		}
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode().Perm())
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Fatalf("directory mode %v", st.Mode().Perm())
	}
	if got := names(t, dir); !slices.Equal(got, []string{"x.pem"}) {
		t.Fatalf("directory holds %v, want only the file", got)
	}
}

func TestWriteFileFailsWithoutTouchingTheOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(filepath.Join(dir, "f", "x"), []byte("new"), 0o644); err == nil {
		t.Fatal("write under a regular file succeeded")
	}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "d", "inside"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A non-empty directory where the file should be: the rename fails, the temporary file goes.
	if err := WriteFile(filepath.Join(dir, "d"), []byte("new"), 0o644); err == nil {
		t.Fatal("write over a directory succeeded")
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Fatalf("old file now %q", b)
	}
	if got := names(t, dir); !slices.Equal(got, []string{"d", "f"}) {
		t.Fatalf("directory holds %v", got)
	}
}

// A batch's files appear only at Commit, with its removals; an aborted batch (a crash before
// Commit leaves the same) changes nothing, and what it leaves is temporary (TempPrefix).
func TestBatchCommitsTogether(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a", "gone"} {
		if err := WriteFile(filepath.Join(dir, n), []byte("old"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b, err := NewBatch(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b"} {
		if err := b.Write(n, []byte("new "+n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b.Remove("gone")
	b.Remove("never-was")
	if err := b.Write("../x", nil, 0o600); err == nil {
		t.Fatal("a name outside the directory was accepted")
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "a")); string(data) != "old" {
		t.Fatalf("before Commit, a is %q", data)
	}
	temps := 0
	for _, n := range names(t, dir) {
		if strings.HasPrefix(n, TempPrefix) {
			temps++
		}
	}
	if temps != 2 {
		t.Fatalf("before Commit: %d temporary files, want 2 (%v)", temps, names(t, dir))
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := names(t, dir); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("after Commit the directory holds %v", got)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "b")); string(data) != "new b" {
		t.Fatalf("b is %q", data)
	}

	b, err = NewBatch(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Write("a", []byte("lost"), 0o600); err != nil {
		t.Fatal(err)
	}
	b.Remove("b")
	b.Abort()
	if got := names(t, dir); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("after Abort the directory holds %v", got)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "a")); string(data) != "new a" {
		t.Fatalf("after Abort, a is %q", data)
	}
}

func TestWriteFileIn(t *testing.T) {
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := WriteFileIn(root, filepath.Join(".discovery", "x"), []byte("d"), 0o600); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, ".discovery", "x")); string(data) != "d" {
		t.Fatalf("read %q", data)
	}
	if err := WriteFileIn(root, filepath.Join("..", "escape"), []byte("d"), 0o600); err == nil {
		t.Fatal("a path outside the root was written")
	}
}
