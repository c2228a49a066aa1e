package hub

import (
	"fmt"
	"path/filepath"
	"strings"

	"nodehub/hub/tokens"
)

// tokensDir is where the token store keeps its files, under --root-dir.
const tokensDir = "tokens"

// openTokens opens the token store under --root-dir; it refuses a place inside the cache directory
// (a component's cache can be dropped or read back by other tools; tokens must not).
func openTokens(cfg Config) (*tokens.Store, error) {
	dir := ""
	if cfg.RootDir != "" {
		dir = filepath.Join(cfg.RootDir, tokensDir)
		if cfg.CacheDir != "" && within(dir, cfg.CacheDir) {
			return nil, fmt.Errorf("hub: the token store %s may not be inside the cache directory %s (set --root-dir elsewhere)", dir, cfg.CacheDir)
		}
	}
	s, err := tokens.Open(dir, tokens.Options{Log: cfg.Log})
	if err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	return s, nil
}

// within reports whether path is dir or below it, comparing the cleaned names (the flags name
// both from the same working directory).
func within(path, dir string) bool {
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(path))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
