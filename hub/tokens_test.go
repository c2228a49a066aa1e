package hub

import (
	"net/http/httptest"
	"path/filepath"
	"testing"

	"nodehub/hub/remote"
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

func TestCallerOf(t *testing.T) {
	r := httptest.NewRequest("POST", "/", nil)
	if callerOf(r, remote.Node) != "node" || callerOf(r, remote.Passthrough) != "" {
		t.Fatal("node or anonymous caller")
	}
	r.Header.Set("Authorization", "Bearer a")
	a := callerOf(r, remote.Passthrough)
	r.Header.Set("Authorization", "Bearer b")
	if b := callerOf(r, remote.Passthrough); a == b || a == "" || a == "node" {
		t.Fatalf("credentials not told apart: %q %q", a, b)
	}
}
