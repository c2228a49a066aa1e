package hub

import (
	"encoding/base64"
	"net/http"
	"path/filepath"
	"testing"

	"nodehub/hub/identity"
	"nodehub/hub/remote"
	"nodehub/wire"
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

func TestVouchedTokenReadsItsServiceAccountsCache(t *testing.T) {
	p := &pipeline{pipelineDeps: pipelineDeps{ids: identity.Open("", nil)}}
	enc := base64.RawURLEncoding.EncodeToString
	tok := enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(`{"sub":"system:serviceaccount:ns:app"}`)) + ".sig"
	p.ids.Vouch(tok)
	own, c := p.cacheOwner(&wire.RequestInfo{Component: "app"}, &http.Request{Header: http.Header{"Authorization": {"Bearer " + tok}}}, remote.Passthrough)
	if !p.ids.Vouched(c) || own == "app@"+c.Hash {
		t.Fatalf("a token the cloud issued is not known as its ServiceAccount's: owner %q", own)
	}
}
