// Package identity is the offline identity of requests that bring their own credential. Such a
// request is cached under <component>@<hash>, never with the node's data: the hash of its
// ServiceAccount once the cloud said whose token it is, so a pod whose token kubelet refreshed
// still finds what it cached; else of the credential itself (the token, or the whole header when
// the apiserver would read no bearer token in it).
//
// Who a token is, is learnt only from what the apiserver says it authenticated: a
// SelfSubjectReview sent with the request's own Authorization header (Learn, review.go), or the
// token is one the cloud issued (a TokenRequest's answer, Vouch). Never from the token's claims
// (unsigned until the apiserver checks them) nor from any answer's status: a header the apiserver
// serves as anonymous ("Bearer  tok", two spaces) gets 2xx for what anonymous may read. Until
// then the request reads and writes the cache of the token's own hash, which a forged token finds
// empty. The header is read as the apiserver reads it (wire.BearerToken). Which token hashes
// belong to which ServiceAccount is kept in memory (bounded) and in one small file under
// --root-dir, rewritten at most once per saveEvery, so a hub restarted offline still knows its
// pods.
package identity

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"nodehub/durable"
	"nodehub/wire"
)

const (
	maxEntries = 1024
	saveEvery  = time.Minute
	fileName   = "reviewed-identities.json"
	// oldFileName held identities learnt from a token's claims and any 2xx (before v2 of the
	// rule): not trusted, removed at Open.
	oldFileName = "identities.json"
)

// Credential is what the hub knows of a request's own credential: hashes only, the token is not
// kept.
type Credential struct {
	// Hash is of the bearer token as the apiserver reads it, or of the whole header when the
	// apiserver reads no bearer token in it.
	Hash string
	// Bearer: the apiserver reads a bearer token in the header. Only such a credential is ever
	// asked about, vouched for or given a ServiceAccount's cache; any other is anonymous to the
	// apiserver, and to the hub a cache of its own.
	Bearer bool
}

// Of reads an Authorization header as the apiserver does (wire.BearerToken). Tokens, other
// headers and ServiceAccounts hash disjoint texts ("token:...", "credential:..." and "sa:..."):
// no Authorization header, whatever it holds (such as "sa:system:serviceaccount:ns:name"), hashes
// to a ServiceAccount's cache or to another's token.
func Of(auth string) Credential {
	if tok, ok := wire.BearerToken(auth); ok {
		return Credential{Hash: tokenHash(tok), Bearer: true}
	}
	return Credential{Hash: shortHash("credential:" + auth)}
}

func tokenHash(token string) string { return shortHash("token:" + canonical(token)) }

// canonical returns a JWT (three dot-separated base64url parts) in one spelling: the apiserver's
// JWT parser decodes each part loosely (non-zero trailing bits, padding), so one signed token has
// many spellings that all verify; hashed as sent, each would be a new token to ask about and to
// keep, and one pod's spellings could push every other pod's out of the table. Anything else is
// returned as it is.
func canonical(token string) string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return token
	}
	var b strings.Builder
	for i, part := range parts {
		raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(part, "="))
		if err != nil {
			return token
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(base64.RawURLEncoding.EncodeToString(raw))
	}
	return b.String()
}

func serviceAccountHash(username string) string { return shortHash("sa:" + username) }

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// serviceAccountOf returns the "sub" claim of a JWT when it names a ServiceAccount
// (system:serviceaccount:<ns>:<name>), without checking the signature: only for a token the
// cloud issued (Vouch).
func serviceAccountOf(tok string) string {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 || len(parts[1]) > 8192 {
		return ""
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var claims struct {
		Sub string `json:"sub"`
	}
	if json.Unmarshal(payload, &claims) != nil || !isServiceAccount(claims.Sub) {
		return ""
	}
	return claims.Sub
}

// isServiceAccount reports whether a username is a ServiceAccount's:
// system:serviceaccount:<namespace>:<name>, neither empty.
func isServiceAccount(username string) bool {
	rest, ok := strings.CutPrefix(username, "system:serviceaccount:")
	ns, name, ok2 := strings.Cut(rest, ":")
	return ok && ok2 && ns != "" && name != "" && !strings.Contains(name, ":")
}

// Owner names whose cache a request that brought its own credential (the Authorization header
// auth) reads and its answers fill (OwnerOf), component@anonymous without one; c is the
// request's credential.
func (id *Table) Owner(component, auth string) (owner string, c Credential) {
	if auth == "" {
		return component + "@anonymous", Credential{}
	}
	c = Of(auth)
	return id.OwnerOf(component, c), c
}

// OwnerOf names credential c's cache: component@<hash of its ServiceAccount> once the cloud said
// whose token it is, else component@<hash of the credential>; so nothing cached for one identity
// is read back for another.
func (id *Table) OwnerOf(component string, c Credential) string {
	if c.Bearer {
		if own := id.owner(c.Hash); own != "" {
			return component + "@" + own
		}
	}
	return component + "@" + c.Hash
}

// Vouched reports whether the cloud said who credential c is (Learn, Vouch): offline, only such a
// credential may create anything (a made-up one would be a new owner with a cache of its own for
// every token a pod invents).
func (id *Table) Vouched(c Credential) bool {
	return c.Bearer && id.owner(c.Hash) != ""
}

// Vouch records that the cloud issued token (a TokenRequest's answer): a request that brings it
// reads and writes its ServiceAccount's cache from the start.
func (id *Table) Vouch(token string) {
	if sa := serviceAccountOf(token); sa != "" {
		id.learn(tokenHash(token), serviceAccountHash(sa))
	}
}

// Table maps hashes of tokens the cloud said it authenticated to the hash of their
// ServiceAccount (or, for a user that is no ServiceAccount, to the token's own hash), and bounds
// the questions asked to learn them (review.go).
type Table struct {
	path string // "" keeps them in memory only
	log  *slog.Logger

	mu      sync.Mutex
	m       map[string]string
	order   []string // insertion order, for eviction
	dirty   bool
	reviews reviews
}

// Open returns the table kept under rootDir ("": in memory only), with what it saved last.
func Open(rootDir string, log *slog.Logger) *Table {
	if log == nil {
		log = slog.Default()
	}
	id := &Table{log: log, m: map[string]string{}, reviews: newReviews()}
	if rootDir == "" {
		return id
	}
	id.path = filepath.Join(rootDir, fileName)
	if data, err := os.ReadFile(id.path); err == nil {
		var saved [][2]string
		if json.Unmarshal(data, &saved) == nil {
			for _, e := range saved {
				id.addLocked(e[0], e[1])
			}
		}
		id.dirty = false
	}
	if err := os.Remove(filepath.Join(rootDir, oldFileName)); err != nil && !os.IsNotExist(err) {
		log.Warn("identities: remove the old table", "err", err)
	}
	return id
}

// owner returns the hash whose cache a token reads (its ServiceAccount's, or its own) once the
// cloud vouched for it, or "".
func (id *Table) owner(tokenHash string) string {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.m[tokenHash]
}

// learn records that the cloud vouched for the token with hash tokenHash: it reads the cache of
// hash sa.
func (id *Table) learn(tokenHash, sa string) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.m[tokenHash] == sa {
		return
	}
	id.addLocked(tokenHash, sa)
}

func (id *Table) addLocked(tokenHash, sa string) {
	if _, ok := id.m[tokenHash]; !ok {
		id.order = append(id.order, tokenHash)
	}
	id.m[tokenHash] = sa
	for len(id.order) > maxEntries {
		delete(id.m, id.order[0])
		id.order = id.order[1:]
	}
	id.dirty = true
}

// Run saves the table when it changed, at most once per saveEvery, until ctx ends (the hub
// saves once more when it stops: Save).
func (id *Table) Run(ctx context.Context) {
	t := time.NewTicker(saveEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			id.Save()
		}
	}
}

// Save writes the table when it changed since the last save.
func (id *Table) Save() {
	id.mu.Lock()
	if !id.dirty || id.path == "" {
		id.mu.Unlock()
		return
	}
	saved := make([][2]string, 0, len(id.order))
	for _, h := range id.order {
		saved = append(saved, [2]string{h, id.m[h]})
	}
	id.dirty = false
	id.mu.Unlock()
	data, _ := json.Marshal(saved)
	if err := durable.WriteFile(id.path, data, 0o600); err != nil {
		id.log.Warn("identities: save", "err", err)
		id.mu.Lock()
		id.dirty = true
		id.mu.Unlock()
	}
}
