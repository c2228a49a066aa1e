// Package tokens keeps the last ServiceAccount token the cloud issued for each token request
// (kubelet's `create serviceaccounts/<sa>/token`), so the same request is answered offline, also
// after a reboot, while that token is still valid.
//
// What survives a crash, and why: each entry is one small file (0600) in a directory (0700) of
// its own under --root-dir. Changes are saved in batches, at most SaveDelay after the first one:
// every changed entry is written to a hidden temporary file and made durable (fdatasync), they
// are renamed over the old files, and one fsync of the directory makes the renames durable
// (durable.Batch, which says why not one syncfs). So a crash leaves each file either whole and
// old or whole and new; at most the changes of the last SaveDelay are lost. A refreshed token lost that way leaves the previous one of the same request,
// which is still valid (kubelet refreshes a token at 80% of its life); a token for a new pod lost
// that way means the pod gets a stand-in offline until the cloud returns. A refresh whose
// predecessor on disk stays valid for more than PersistHorizon is not written until a clean stop
// (SaveAll) or until that predecessor nears its end: kubelet's default tokens, which the apiserver
// makes valid for a year, are written once per pod, not once per hourly refresh. A written token
// costs one small file and its fdatasync; the directory is fsynced once per batch.
//
// A token is served to the identity that asked for it only (Key.Identity), and only while valid;
// expired entries are deleted from memory and disk. The store is bounded in entries and bytes:
// beyond either bound the entry that expires first goes; clients with their own credentials may
// hold a quarter of either, and their tokens go before kubelet's.
package tokens

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"nodehub/durable"
)

// Defaults of the store's bounds and batching.
const (
	DefaultMaxEntries = 1024
	DefaultMaxBytes   = 2 << 20
	DefaultSaveDelay  = 10 * time.Second
	// maxEntryBytes bounds one entry (a token is about 1 KB; the apiserver's are far below this).
	maxEntryBytes = 16 << 10
	pruneEvery    = time.Minute
	// PersistHorizon: a refreshed token is written at once only when the token on disk for the
	// same request has less validity left than this; else it waits for a clean stop (or for the
	// disk copy to near its end). Kubelet's default tokens are valid for a year (the apiserver
	// extends them), so their hourly refreshes cost the flash nothing.
	PersistHorizon = 24 * time.Hour
)

// NodeIdentity is Key.Identity for the node's own clients (kubelet).
const NodeIdentity = "node"

// Key is what makes two token requests the same: who asked, for which ServiceAccount, audiences,
// lifetime and bound object (kubelet's own token cache key, plus the identity).
type Key struct {
	// Identity is the requester: NodeIdentity for the node's own clients, else a hash of the
	// credential.
	Identity          string   `json:"identity"`
	Namespace         string   `json:"namespace"`
	ServiceAccount    string   `json:"serviceAccount"`
	UID               string   `json:"uid,omitempty"` // the request's metadata.uid precondition
	Audiences         []string `json:"audiences,omitempty"`
	ExpirationSeconds int64    `json:"expirationSeconds,omitempty"`
	BoundKind         string   `json:"boundKind,omitempty"`
	BoundAPIVersion   string   `json:"boundAPIVersion,omitempty"`
	BoundName         string   `json:"boundName,omitempty"`
	BoundUID          string   `json:"boundUID,omitempty"`
}

// name is the entry's file name: a hash of the key (the key itself holds names, not secrets).
func (k Key) name() string {
	b, _ := json.Marshal(k)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// Entry is a token the cloud issued.
type Entry struct {
	Token string `json:"token"`
	// Expiration is status.expirationTimestamp as the cloud answered it.
	Expiration time.Time `json:"expiration"`
	// ValidUntil is when the token stops being accepted (its JWT exp claim, which the apiserver
	// extends for kubelet's tokens; Expiration when it has none).
	ValidUntil time.Time `json:"validUntil"`
	// Audiences and ExpirationSeconds are the spec as the cloud answered it (it fills defaults).
	Audiences         []string `json:"audiences,omitempty"`
	ExpirationSeconds int64    `json:"expirationSeconds,omitempty"`
}

type record struct {
	Key   Key   `json:"key"`
	Entry Entry `json:"entry"`
	size  int64
	disk  time.Time // ValidUntil of the copy on disk; zero: none
}

// Store is the token store. Build it with Open; Run saves it.
type Store struct {
	dir        string // "" keeps tokens in memory only
	maxEntries int
	maxBytes   int64
	saveDelay  time.Duration
	log        *slog.Logger
	now        func() time.Time

	saving sync.Mutex // one save at a time

	mu      sync.Mutex
	m       map[string]*record
	bytes   int64
	dirty   map[string]bool // names to write (present) or delete (absent from m)
	pending map[string]bool // names whose newer token waits for a clean stop (PersistHorizon)
	kick    chan struct{}
}

// Options tune a store; zero values take the defaults.
type Options struct {
	MaxEntries int
	MaxBytes   int64
	SaveDelay  time.Duration
	Log        *slog.Logger
	Now        func() time.Time
}

// Open loads the tokens saved in dir (created 0700 when missing), dropping expired and unreadable
// ones. An empty dir keeps tokens in memory only.
func Open(dir string, o Options) (*Store, error) {
	s := &Store{dir: dir, maxEntries: o.MaxEntries, maxBytes: o.MaxBytes, saveDelay: o.SaveDelay, log: o.Log, now: o.Now,
		m: map[string]*record{}, dirty: map[string]bool{}, pending: map[string]bool{}, kick: make(chan struct{}, 1)}
	if s.maxEntries <= 0 {
		s.maxEntries = DefaultMaxEntries
	}
	if s.maxBytes <= 0 {
		s.maxBytes = DefaultMaxBytes
	}
	if s.saveDelay <= 0 {
		s.saveDelay = DefaultSaveDelay
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	if dir == "" {
		return s, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	now := s.now()
	for _, de := range des {
		name := de.Name()
		p := filepath.Join(dir, name)
		if strings.HasPrefix(name, ".") || !de.Type().IsRegular() {
			os.Remove(p) // a temporary file of a save a crash interrupted
			continue
		}
		r, err := readRecord(p)
		if err != nil || r.Key.name() != name || !now.Before(r.Entry.ValidUntil) {
			os.Remove(p)
			continue
		}
		r.disk = r.Entry.ValidUntil
		s.m[name] = r
		s.bytes += r.size
	}
	s.evictLocked()
	return s, nil
}

func readRecord(path string) (*record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxEntryBytes+1))
	if err != nil || len(b) > maxEntryBytes {
		return nil, errors.New("tokens: unreadable entry")
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil || r.Entry.Token == "" {
		return nil, errors.New("tokens: unreadable entry")
	}
	r.size = int64(len(b))
	return &r, nil
}

// Put records the token the cloud issued for k, replacing the one before.
func (s *Store) Put(k Key, e Entry) {
	if e.Token == "" || !s.now().Before(e.ValidUntil) {
		return
	}
	r := &record{Key: k, Entry: e}
	b, _ := json.Marshal(r)
	if len(b) > maxEntryBytes {
		return
	}
	r.size = int64(len(b))
	name := k.name()
	s.mu.Lock()
	if old := s.m[name]; old != nil {
		s.bytes -= old.size
		r.disk = old.disk
	}
	s.m[name] = r
	s.bytes += r.size
	later := r.disk.After(s.now().Add(PersistHorizon))
	if later {
		s.pending[name] = true // the older token on disk stays valid long enough
	} else {
		delete(s.pending, name)
		s.dirty[name] = true
	}
	s.evictLocked()
	s.mu.Unlock()
	if later {
		return
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Get returns the token kept for k while it is valid.
func (s *Store) Get(k Key) (Entry, bool) {
	name := k.name()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.m[name]
	if r == nil {
		return Entry{}, false
	}
	if !s.now().Before(r.Entry.ValidUntil) {
		s.dropLocked(name)
		return Entry{}, false
	}
	return r.Entry, true
}

// Len returns the number of tokens kept.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

func (s *Store) dropLocked(name string) {
	if r := s.m[name]; r != nil {
		s.bytes -= r.size
		delete(s.m, name)
		delete(s.pending, name)
		s.dirty[name] = true
	}
}

// evictLocked drops entries until the store is within its bounds: the tokens of clients with
// their own credentials first (they may hold at most a quarter of the entries and bytes, so no
// pod can push kubelet's tokens out), then those that expire first.
func (s *Store) evictLocked() {
	others, otherBytes := 0, int64(0)
	for _, r := range s.m {
		if r.Key.Identity != NodeIdentity {
			others++
			otherBytes += r.size
		}
	}
	within := func() bool {
		return len(s.m) <= s.maxEntries && s.bytes <= s.maxBytes && others <= s.maxEntries/4 && otherBytes <= s.maxBytes/4
	}
	if within() {
		return
	}
	names := make([]string, 0, len(s.m))
	for n := range s.m {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := s.m[names[i]], s.m[names[j]]
		if an, bn := a.Key.Identity == NodeIdentity, b.Key.Identity == NodeIdentity; an != bn {
			return bn
		}
		return a.Entry.ValidUntil.Before(b.Entry.ValidUntil)
	})
	for _, n := range names {
		if within() {
			return
		}
		if r := s.m[n]; r.Key.Identity != NodeIdentity {
			others--
			otherBytes -= r.size
		}
		s.dropLocked(n)
	}
}

// pruneLocked drops expired entries, and schedules the write of newer tokens whose copy on disk
// nears its end.
func (s *Store) pruneLocked() {
	now := s.now()
	for n, r := range s.m {
		if !now.Before(r.Entry.ValidUntil) {
			s.dropLocked(n)
		}
	}
	for n := range s.pending {
		if r := s.m[n]; r != nil && !r.disk.After(now.Add(PersistHorizon)) {
			delete(s.pending, n)
			s.dirty[n] = true
		}
	}
}

// Run saves changes in batches (SaveDelay after the first change of a batch) and deletes expired
// tokens, until ctx ends. Call Save once more after it returns to keep the last changes.
func (s *Store) Run(ctx context.Context) {
	prune := time.NewTicker(pruneEvery)
	defer prune.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-prune.C:
			s.mu.Lock()
			s.pruneLocked()
			n := len(s.dirty)
			s.mu.Unlock()
			if n > 0 {
				s.saveLogged()
			}
		case <-s.kick:
			t := time.NewTimer(s.saveDelay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			s.saveLogged()
		}
	}
}

func (s *Store) saveLogged() {
	if err := s.Save(); err != nil {
		s.log.Warn("tokens: save", "err", err)
	}
}

// Save writes what changed since the last save, except refreshes PersistHorizon lets wait (see
// the package comment for what it guarantees).
func (s *Store) Save() error { return s.save(false) }

// SaveAll writes every change, refreshes that could wait too: at a clean stop.
func (s *Store) SaveAll() error { return s.save(true) }

func (s *Store) save(all bool) error {
	s.saving.Lock()
	defer s.saving.Unlock()
	s.mu.Lock()
	if all {
		for n := range s.pending {
			s.dirty[n] = true
		}
		clear(s.pending)
	}
	if s.dir == "" {
		clear(s.dirty)
		s.mu.Unlock()
		return nil
	}
	ps := make([]pair, 0, len(s.dirty))
	for n := range s.dirty {
		p := pair{name: n}
		if r := s.m[n]; r != nil {
			p.data, _ = json.Marshal(r)
			p.valid = r.Entry.ValidUntil
		}
		ps = append(ps, p)
	}
	clear(s.dirty)
	s.mu.Unlock()
	if len(ps) == 0 {
		return nil
	}
	err := s.write(ps)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range ps {
		switch r := s.m[p.name]; {
		case err != nil: // try again with the next batch
			s.dirty[p.name] = true
		case r != nil && p.data != nil:
			r.disk = p.valid
		}
	}
	return err
}

// pair is one file of a batch: its new contents, or nil to delete it.
type pair struct {
	name  string
	data  []byte
	valid time.Time
}

// write applies one batch (durable.Batch): temporary files, each made durable, renames and
// removals, one directory fsync.
func (s *Store) write(ps []pair) error {
	b, err := durable.NewBatch(s.dir)
	if err != nil {
		return fmt.Errorf("tokens: %w", err)
	}
	for _, p := range ps {
		if p.data == nil {
			b.Remove(p.name)
			continue
		}
		if err := b.Write(p.name, p.data, 0o600); err != nil {
			b.Abort()
			return fmt.Errorf("tokens: %w", err)
		}
	}
	if err := b.Commit(); err != nil {
		return fmt.Errorf("tokens: %w", err)
	}
	return nil
}
