package hub

import (
	"path/filepath"
	"testing"
)

func TestTokenStoreNeverInsideTheCache(t *testing.T) {
	dir := t.TempDir()
	if _, err := openTokens(Config{RootDir: filepath.Join(dir, "cache", "root"), CacheDir: filepath.Join(dir, "cache")}); err == nil {
		t.Fatal("a token store inside the cache directory was accepted")
	}
	if _, err := openTokens(Config{RootDir: filepath.Join(dir, "root"), CacheDir: filepath.Join(dir, "cache")}); err != nil {
		t.Fatal(err)
	}
	if !within("/a/b", "/a") || within("/ab", "/a") || within("/a/../c", "/a") {
		t.Fatal("within")
	}
}
