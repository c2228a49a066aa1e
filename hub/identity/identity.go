// Package identity is the offline identity of requests that bring their own credential. Such a
// request is cached under <component>@<hash>, never with the node's data. For a ServiceAccount
// token the hash is of the ServiceAccount, so a pod whose token kubelet refreshed still finds
// what it cached; for any other credential it is of the credential itself.
//
// A token's claims cannot be checked offline, so the ServiceAccount is trusted only once the
// cloud accepted the token: until then (and for every token the cloud never answered with a
// 2xx) the request reads and writes the cache of the token's own hash, which a forged token
// finds empty. Which token hashes belong to which ServiceAccount is kept in memory (bounded) and
// in one small file under --root-dir, rewritten at most once per saveEvery, so a hub restarted
// offline still knows its pods.
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
)

const (
	maxEntries = 1024
	saveEvery  = time.Minute
	fileName   = "identities.json"
)

// Credential is what the hub knows of a request's own credential: hashes only, the token is not
// kept.
type Credential struct {
	Hash string // of the Authorization header
	SA   string // hash of the ServiceAccount the token claims, "" when it is not one
}

// Of reads an Authorization header. The two hashes are of disjoint texts ("credential:..." and
// "sa:..."): no Authorization header, whatever it holds (such as
// "sa:system:serviceaccount:ns:name"), hashes to a ServiceAccount's cache.
func Of(auth string) Credential {
	c := Credential{Hash: shortHash("credential:" + auth)}
	if tok, ok := strings.CutPrefix(auth, "Bearer "); ok {
		if sub := serviceAccountOf(strings.TrimSpace(tok)); sub != "" {
			c.SA = shortHash("sa:" + sub)
		}
	}
	return c
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// serviceAccountOf returns the "sub" claim of a JWT when it names a ServiceAccount
// (system:serviceaccount:<ns>:<name>), without checking the signature: the caller trusts it only
// after the cloud did.
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
	if json.Unmarshal(payload, &claims) != nil || !strings.HasPrefix(claims.Sub, "system:serviceaccount:") {
		return ""
	}
	return claims.Sub
}

// Owner names whose cache a request that brought its own credential (the Authorization header
// auth) reads and its answers fill: component@<hash of its ServiceAccount> once the cloud
// accepted the token, else component@<hash of the credential>, component@anonymous without one;
// so nothing cached for one identity is read back for another. c is the request's credential,
// for Accepted.
func (id *Table) Owner(component, auth string) (owner string, c Credential) {
	if auth == "" {
		return component + "@anonymous", Credential{}
	}
	c = Of(auth)
	if sa := id.owner(c.Hash); sa != "" && sa == c.SA {
		return component + "@" + sa, c
	}
	return component + "@" + c.Hash, c
}

// Accepted records that the cloud answered a request with credential c with a 2xx: a
// ServiceAccount's token reads and writes that ServiceAccount's cache from now on. It returns the
// owner the answer is cached for: component@<ServiceAccount hash>, or "" when c is not a
// ServiceAccount's token.
func (id *Table) Accepted(component string, c Credential) string {
	if c.SA == "" {
		if c.Hash != "" {
			id.learn(c.Hash, c.Hash) // accepted, and its own cache's name: Vouched
		}
		return ""
	}
	id.learn(c.Hash, c.SA)
	return component + "@" + c.SA
}

// Vouched reports whether the cloud ever accepted credential c (Accepted, Vouch): offline, only such
// a credential may create anything (a made-up one would be a new owner with a cache of its own for
// every token a pod invents).
func (id *Table) Vouched(c Credential) bool {
	if c.Hash == "" {
		return false
	}
	got := id.owner(c.Hash)
	return got != "" && (got == c.SA || got == c.Hash)
}

// Vouch records that the cloud issued token (a TokenRequest's answer): a request that brings it
// reads and writes its ServiceAccount's cache from the start.
func (id *Table) Vouch(token string) {
	if c := Of("Bearer " + token); c.SA != "" {
		id.learn(c.Hash, c.SA)
	}
}

// Table maps hashes of tokens the cloud accepted to the hash of their ServiceAccount (or, for a
// credential that is not a ServiceAccount's token, to its own hash).
type Table struct {
	path string // "" keeps them in memory only
	log  *slog.Logger

	mu    sync.Mutex
	m     map[string]string
	order []string // insertion order, for eviction
	dirty bool
}

// Open returns the table kept under rootDir ("": in memory only), with what it saved last.
func Open(rootDir string, log *slog.Logger) *Table {
	if log == nil {
		log = slog.Default()
	}
	id := &Table{log: log, m: map[string]string{}}
	if rootDir != "" {
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
	}
	return id
}

// owner returns the ServiceAccount hash the cloud vouched for, or "".
func (id *Table) owner(tokenHash string) string {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.m[tokenHash]
}

// learn records that the cloud accepted the token with hash tokenHash as ServiceAccount sa.
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
