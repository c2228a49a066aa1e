package hub

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"

	"nodehub/hub/tokens"
	"nodehub/wire"
)

// Kubelet's token requests pass through online as they are; the hub keeps the token the cloud
// issued (hub/tokens), so the same request is answered offline (hub/local).

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

// isTokenRequest reports whether a request asks for a ServiceAccount token.
func isTokenRequest(ri *wire.RequestInfo) bool {
	return ri.IsResource && ri.Verb == wire.VerbCreate && ri.Group == "" && ri.Resource == "serviceaccounts" && ri.Subresource == "token"
}

// recordToken keeps the token of a successful answer to a token request whose body was peeked.
// The answer is read whole (a TokenRequest is small) and passed on unchanged.
func (s *Server) recordToken(q *proxyRequest, resp *http.Response) {
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Content-Encoding") != "" || resp.ContentLength > tokens.MaxBody {
		return
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, tokens.MaxBody+1))
	resp.Body = readCloser{io.MultiReader(bytes.NewReader(body), resp.Body), resp.Body}
	if err != nil || len(body) > tokens.MaxBody {
		return
	}
	req, err1 := tokens.Decode(q.kept)
	answer, err2 := tokens.Decode(body)
	if err1 != nil || err2 != nil {
		return
	}
	e, err := tokens.EntryOf(answer)
	if err != nil {
		return
	}
	s.tokens.Put(tokens.KeyOf(q.caller, q.ri.Namespace, q.ri.Name, req), e)
	s.ids.Vouch(e.Token)
}
