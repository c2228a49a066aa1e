package pool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"nodehub/wire"
)

// Notes are what each hub of a pool tells the others about its own node (the hub's endpoint
// corrections: its pods as kubelet reports them while the cloud cannot hear it). Each hub
// publishes one note (Publish); the leader gathers every member's, each filed under the node its
// client certificate names (never under a name the note itself gives), and every member reads
// them all from the leader, long-polling, so a note reaches the pool within a round trip. Unlike
// the shared stores, notes go on while the cloud is unreachable: that is when they matter.
// Bounded: a note's size, the number of nodes, and a note not refreshed for noteTTL is dropped.

const (
	// MaxNoteBytes bounds one node's note.
	MaxNoteBytes = 256 << 10
	// MaxNoteNodes and MaxNotesBytes bound the notes a leader keeps (and a member reads).
	MaxNoteNodes  = 1024
	MaxNotesBytes = 8 << 20
	// noteTTL: a leader drops a note its node has not sent again for this long; members send
	// theirs every noteRefresh.
	noteTTL     = 2 * time.Minute
	noteRefresh = 30 * time.Second
	// notePoll is how long a leader holds a member's read open when nothing changed.
	notePoll = 20 * time.Second
	// NotesPath is the pool port's path for notes.
	NotesPath = "/pool/v1/notes"
)

type note struct {
	doc []byte
	at  time.Time
}

// noteBoard is one hub's side of the notes: its own, and (leading) the pool's.
type noteBoard struct {
	mu      sync.Mutex
	own     []byte
	ownGen  uint64
	pool    map[string]note // leader: by node
	gen     uint64          // leader: changes of pool
	changed chan struct{}   // leader: closed at each change of pool
	kick    chan struct{}   // own changed
	members map[string]bool // the nodes whose notes are taken and read; nil: any node's
}

// newNoteBoard takes nobody's notes until the pool's members are known (setMembers).
func newNoteBoard() *noteBoard {
	return &noteBoard{pool: map[string]note{}, changed: make(chan struct{}), kick: make(chan struct{}, 1), members: map[string]bool{}}
}

// setMembers sets the nodes whose notes are taken and read (nil: any node's, only where the
// operator accepts self-declared membership) and drops the notes of nodes no longer members.
func (b *noteBoard) setMembers(m map[string]bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.members = m
	changed := false
	for n := range b.pool {
		if !b.memberLocked(n) {
			delete(b.pool, n)
			changed = true
		}
	}
	if changed {
		b.bumpLocked()
	}
}

func (b *noteBoard) member(node string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.memberLocked(node)
}

func (b *noteBoard) memberLocked(node string) bool { return b.members == nil || b.members[node] }

// onlyMembers returns the notes of members only (what a member reads from its leader).
func (b *noteBoard) onlyMembers(notes map[string][]byte) map[string][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string][]byte, len(notes))
	for n, doc := range notes {
		if b.memberLocked(n) {
			out[n] = doc
		}
	}
	return out
}

// Publish sets this hub's note (nil: none) and sends it to the pool at once.
func (p *Pool) Publish(doc []byte) {
	if p == nil || len(doc) > MaxNoteBytes {
		return
	}
	b := p.notes
	b.mu.Lock()
	if bytes.Equal(b.own, doc) {
		b.mu.Unlock()
		return
	}
	b.own = bytes.Clone(doc)
	b.ownGen++
	b.mu.Unlock()
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// errNotMember refuses the note of a node that is not one of the pool's members.
var errNotMember = errors.New("not one of the pool's members")

// put files a node's note (leader). An empty note removes it.
func (b *noteBoard) put(node string, doc []byte, now time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	old, had := b.pool[node]
	switch {
	case !b.memberLocked(node):
		return errNotMember
	case len(doc) == 0:
		if !had {
			return nil
		}
		delete(b.pool, node)
	case !had && len(b.pool) >= MaxNoteNodes:
		return fmt.Errorf("pool: notes of %d nodes kept already", MaxNoteNodes)
	case b.sizeLocked()-len(old.doc)+len(doc) > MaxNotesBytes:
		return fmt.Errorf("pool: notes past %d bytes", MaxNotesBytes)
	default:
		b.pool[node] = note{doc: bytes.Clone(doc), at: now}
		if had && bytes.Equal(old.doc, doc) {
			return nil // a refresh
		}
	}
	b.bumpLocked()
	return nil
}

func (b *noteBoard) sizeLocked() int {
	n := 0
	for _, nt := range b.pool {
		n += len(nt.doc)
	}
	return n
}

func (b *noteBoard) bumpLocked() {
	b.gen++
	close(b.changed)
	b.changed = make(chan struct{})
}

// expire drops notes not refreshed for noteTTL.
func (b *noteBoard) expire(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	changed := false
	for n, nt := range b.pool {
		if now.Sub(nt.at) > noteTTL {
			delete(b.pool, n)
			changed = true
		}
	}
	if changed {
		b.bumpLocked()
	}
}

// notesAnswer is what a leader answers a read of the notes.
type notesAnswer struct {
	Gen   uint64            `json:"gen"`
	Notes map[string][]byte `json:"notes"`
}

func (b *noteBoard) snapshot() notesAnswer {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := notesAnswer{Gen: b.gen, Notes: make(map[string][]byte, len(b.pool))}
	for n, nt := range b.pool {
		out.Notes[n] = nt.doc
	}
	return out
}

// serveNotes answers a member on the pool port: PUT files its note under the node its client
// certificate names; GET ?after=<gen> answers the pool's notes once they are newer than gen
// (or after notePoll). Only the leader answers.
func (p *Pool) serveNotes(w http.ResponseWriter, r *http.Request) {
	if !p.Leading() {
		http.Error(w, "nodehub: not the pool's leader", http.StatusServiceUnavailable)
		return
	}
	b := p.notes
	switch r.Method {
	case http.MethodPut:
		node := ""
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			node = strings.TrimPrefix(r.TLS.PeerCertificates[0].Subject.CommonName, "system:node:")
		}
		if node == "" {
			http.Error(w, "nodehub: no node certificate", http.StatusUnauthorized)
			return
		}
		doc, err := io.ReadAll(io.LimitReader(r.Body, MaxNoteBytes+1))
		if err != nil || len(doc) > MaxNoteBytes {
			http.Error(w, fmt.Sprintf("nodehub: a note is at most %d bytes", MaxNoteBytes), http.StatusRequestEntityTooLarge)
			return
		}
		if err := b.put(node, doc, time.Now()); errors.Is(err, errNotMember) {
			wire.WriteStatus(w, wire.NegotiateAccept(r.Header.Get("Accept")), http.StatusForbidden,
				"nodehub: node "+node+" is not one of the pool's members (the NodePool's status.nodes named in its annotation "+AnnotationMembers+"): its note is refused")
			return
		} else if err != nil {
			http.Error(w, err.Error(), http.StatusInsufficientStorage)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case http.MethodGet:
		after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
		t := time.NewTimer(notePoll)
		defer t.Stop()
		for {
			b.mu.Lock()
			gen, ch := b.gen, b.changed
			b.mu.Unlock()
			if gen != after {
				break
			}
			select {
			case <-ch:
				continue
			case <-t.C:
			case <-r.Context().Done():
				return
			}
			break
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(b.snapshot())
	default:
		http.Error(w, "nodehub: GET or PUT", http.StatusMethodNotAllowed)
	}
}

// runNotes keeps this hub's note at the leader and the pool's notes here (told to OnNotes) until
// ctx ends.
func (p *Pool) runNotes(ctx context.Context) {
	if p.cfg.OnNotes == nil {
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.sendNotes(ctx)
	}()
	p.receiveNotes(ctx)
}

// sendNotes sends this hub's note to the leader (or keeps it, when leading) at each change, and
// every noteRefresh, until ctx ends.
func (p *Pool) sendNotes(ctx context.Context) {
	b := p.notes
	sentGen, sentTo := uint64(0), ""
	tick := time.NewTicker(noteRefresh)
	defer tick.Stop()
	for {
		b.mu.Lock()
		doc, gen := b.own, b.ownGen
		b.mu.Unlock()
		leader, leading := p.leaderNow()
		switch {
		case !b.member(p.cfg.NodeName):
			sentGen, sentTo = 0, "" // not a member: the leader would refuse it
		case leading:
			_ = b.put(p.cfg.NodeName, doc, time.Now())
			sentGen, sentTo = gen, ""
		case leader != "" && (gen != sentGen || leader != sentTo):
			if err := p.putNote(ctx, leader, doc); err == nil {
				sentGen, sentTo = gen, leader
			}
		}
		if leading {
			b.expire(time.Now())
		}
		select {
		case <-ctx.Done():
			return
		case <-b.kick:
		case <-tick.C:
			sentGen = 0 // refresh
		case <-p.leaderChanged():
		case <-time.After(time.Second): // a failed send is tried again
		}
	}
}

// receiveNotes tells OnNotes the pool's notes (the members' only) each time they change, read
// here when leading and from the leader otherwise, until ctx ends.
func (p *Pool) receiveNotes(ctx context.Context) {
	b := p.notes
	var gen uint64
	var last map[string][]byte
	for ctx.Err() == nil {
		leader, leading := p.leaderNow()
		var ans notesAnswer
		var err error
		switch {
		case leading:
			b.mu.Lock()
			ch := b.changed
			b.mu.Unlock()
			ans = b.snapshot()
			if ans.Gen == gen && last != nil {
				select {
				case <-ch:
				case <-p.leaderChanged():
				case <-ctx.Done():
				}
				continue
			}
		case leader == "":
			err = errors.New("no leader")
		default:
			ans, err = p.getNotes(ctx, leader, gen)
		}
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			case <-p.leaderChanged():
			}
			gen = 0
			continue
		}
		gen = ans.Gen
		ans.Notes = b.onlyMembers(ans.Notes)
		if !sameNotes(last, ans.Notes) {
			last = ans.Notes
			p.cfg.OnNotes(ans.Notes)
		}
	}
}

func sameNotes(a, b map[string][]byte) bool {
	if a == nil || len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

// leaderNow returns the leader's holder identity and whether this hub leads.
func (p *Pool) leaderNow() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.leader, p.leading
}

func (p *Pool) leaderChanged() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed
}

func (p *Pool) putNote(ctx context.Context, holder string, doc []byte) error {
	node, addr, _ := strings.Cut(holder, "@")
	ctx, cancel := context.WithTimeout(ctx, p.cfg.LeaderTimeout)
	defer cancel()
	resp, err := p.peer.do(ctx, http.MethodPut, node, addr, NotesPath, doc)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("pool: note to %s: %s", holder, resp.Status)
	}
	return nil
}

func (p *Pool) getNotes(ctx context.Context, holder string, after uint64) (notesAnswer, error) {
	node, addr, _ := strings.Cut(holder, "@")
	ctx, cancel := context.WithTimeout(ctx, notePoll+p.cfg.LeaderTimeout)
	defer cancel()
	resp, err := p.peer.do(ctx, http.MethodGet, node, addr, NotesPath+"?after="+strconv.FormatUint(after, 10), nil)
	if err != nil {
		return notesAnswer{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return notesAnswer{}, fmt.Errorf("pool: notes from %s: %s", holder, resp.Status)
	}
	var ans notesAnswer
	err = json.NewDecoder(io.LimitReader(resp.Body, 2*MaxNotesBytes)).Decode(&ans) // base64 and names
	return ans, err
}

// do sends one request to a leader at addr whose certificate must be node's (as get).
func (c *peerClient) do(ctx context.Context, method, node, addr, path string, body []byte) (*http.Response, error) {
	t, err := c.transport()
	if err != nil {
		return nil, err
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "https://"+addr+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", "nodehub/pool")
	resp, err := t.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 || resp.TLS.PeerCertificates[0].Subject.CommonName != "system:node:"+node {
		resp.Body.Close()
		return nil, fmt.Errorf("pool: the leader at %s is not node %s", addr, node)
	}
	return resp, nil
}
