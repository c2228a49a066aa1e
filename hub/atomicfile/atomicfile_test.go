package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteReplacesWithPermAndLeavesNoTemporaryFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	path := filepath.Join(dir, "x.pem")
	for _, content := range []string{"one", "two"} {
		if err := Write(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil || string(b) != content {
			t.Fatalf("read %q %v, want %q", b, err, content)
		}
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only the file", len(entries))
	}
}

func TestWriteFailsWithoutTouchingTheOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := Write(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A directory where the file should be: the rename fails, the temp file goes.
	if err := Write(filepath.Join(dir, "sub", "..", "f", "x"), []byte("new"), 0o644); err == nil {
		t.Fatal("write under a regular file succeeded")
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Fatalf("old file now %q", b)
	}
}
