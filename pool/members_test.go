package pool

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// nodePoolNamed is a NodePool whose status.nodes are nodes and whose members annotation
// (nodehub.io/members) is named ("" none).
func nodePoolNamed(t *testing.T, name string, rv int, named string, nodes ...string) *object {
	t.Helper()
	q := make([]string, len(nodes))
	for i, n := range nodes {
		q[i] = fmt.Sprintf("%q", n)
	}
	ann := ""
	if named != "" {
		ann = fmt.Sprintf(`,"annotations":{"nodehub.io/members":%q}`, named)
	}
	raw := fmt.Sprintf(`{"kind":"NodePool","apiVersion":"apps.openyurt.io/v1beta2","metadata":{"name":%q,"resourceVersion":"%d"%s},"status":{"nodes":[%s]}}`, name, rv, ann, strings.Join(q, ","))
	o, err := newObject([]byte(raw), nodePoolResource(name))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// Issue 28 (6): a node can label itself into any NodePool (status.nodes follows its Node's
// label), so status.nodes alone elects an intruder that sorts first. Only the nodes an
// administrator named on the NodePool (nodehub.io/members) lead and file notes; a NodePool that
// names none elects nobody.
func TestElectionAndNotesOnlyForNamedMembers(t *testing.T) {
	p, err := New(Config{Mode: ModeLease, NodeName: "edge-1", PoolName: "p", Addr: "10.0.0.1:10269",
		Cloud: func(*http.Request) (*http.Response, error) { return nil, fmt.Errorf("offline") }})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	f := &fakeLeases{at: now}
	f.set("aaa-intruder", "10.9.9.9:10269", now, false)
	f.set("edge-1", "10.0.0.1:10269", now, false)
	f.set("edge-2", "10.0.0.2:10269", now, false)
	np := NewStore(nodePoolResource("p"))
	e := &elector{p: p, passed: map[string]string{}, nodePool: np, list: f.list, canServe: servable, settleFor: new(time.Duration)}
	ctx := context.Background()

	// The intruder labelled its Node into the pool: yurt-manager lists it in status.nodes.
	np.replace([]*object{nodePoolNamed(t, "p", 7, "", "aaa-intruder", "edge-1", "edge-2")}, 7, "apps.openyurt.io/v1beta2", "NodePool")
	e.round(ctx, now)
	if p.leader != "" {
		t.Fatalf("a NodePool naming no members: leader %q, want none", p.leader)
	}
	np.replace([]*object{nodePoolNamed(t, "p", 8, "edge-1, edge-2,edge-9", "aaa-intruder", "edge-1", "edge-2")}, 8, "apps.openyurt.io/v1beta2", "NodePool")
	e.round(ctx, now)
	if p.leader != "edge-1@10.0.0.1:10269" || !p.leading {
		t.Fatalf("named members edge-1, edge-2: leader %q (leading %v), want edge-1", p.leader, p.leading)
	}
	put := func(node string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		p.serveNotes(w, noteRequest(http.MethodPut, node, NotesPath, []byte(`{"from":"`+node+`"}`)))
		return w
	}
	if w := put("aaa-intruder"); w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), `"kind":"Status"`) {
		t.Fatalf("the intruder's note: %d %s, want a 403 Status", w.Code, w.Body.String())
	}
	if w := put("edge-9"); w.Code != http.StatusForbidden {
		t.Fatalf("a named node not in status.nodes filed a note: %d", w.Code)
	}
	if w := put("edge-2"); w.Code != http.StatusNoContent {
		t.Fatalf("a member's note: %d %s", w.Code, w.Body.String())
	}
	w := httptest.NewRecorder()
	p.serveNotes(w, noteRequest(http.MethodGet, "edge-2", NotesPath+"?after=0", nil))
	var ans notesAnswer
	if err := json.Unmarshal(w.Body.Bytes(), &ans); err != nil || len(ans.Notes) != 1 || ans.Notes["edge-2"] == nil {
		t.Fatalf("notes %s (%v), want edge-2's only", w.Body.String(), err)
	}
	// An administrator takes edge-2 out: its note goes.
	np.replace([]*object{nodePoolNamed(t, "p", 9, "edge-1", "aaa-intruder", "edge-1", "edge-2")}, 9, "apps.openyurt.io/v1beta2", "NodePool")
	e.round(ctx, now)
	if s := p.notes.snapshot(); len(s.Notes) != 0 {
		t.Fatalf("a former member's note kept: %v", s.Notes)
	}
}

// nodepool mode: yurt-manager elects among status.nodes (and a node label selector), both of
// which a node can put itself in; a published leader the administrator did not name is not
// followed.
func TestNodePoolModeFollowsOnlyANamedLeader(t *testing.T) {
	var body atomic.Value
	var reads atomic.Int32
	p, err := New(Config{Mode: ModeNodePool, NodeName: "edge-2", PoolName: "p", Addr: "10.0.0.2:10269", LeaderTimeout: 20 * time.Millisecond,
		Cloud: func(*http.Request) (*http.Response, error) {
			reads.Add(1)
			rec := httptest.NewRecorder()
			rec.Header().Set("Content-Type", "application/json")
			_, _ = rec.WriteString(body.Load().(string))
			return rec.Result(), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	np := func(leader string) string {
		return `{"kind":"NodePool","apiVersion":"apps.openyurt.io/v1beta2","metadata":{"name":"p","annotations":{"nodehub.io/members":"edge-1,edge-2"}},` +
			`"status":{"nodes":["aaa-intruder","edge-1","edge-2"],"leaderEndpoints":[{"nodeName":"` + leader + `","address":"10.0.0.7"}]}}`
	}
	// settled waits until the NodePool has been read twice more (a read and its setLeader done).
	settled := func() {
		for n := reads.Load() + 2; reads.Load() < n; {
			time.Sleep(5 * time.Millisecond)
		}
	}
	body.Store(np("aaa-intruder"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.followNodePool(ctx) }()
	defer func() { cancel(); <-done }()
	settled()
	if l := p.currentLeader(); l != "" {
		t.Fatalf("published intruder followed: %q", l)
	}
	body.Store(np("edge-1"))
	settled()
	if l := p.currentLeader(); l != "edge-1@10.0.0.7:10269" {
		t.Fatalf("published member: leader %q, want edge-1@10.0.0.7:10269", l)
	}
}

// The leader takes a note only from a named member: a node that labelled itself into the pool
// (in status.nodes, not named) is refused with a 403 Status, even while the leader is a member.
func TestNotesRefusedFromANodeThatLabelledItselfIn(t *testing.T) {
	p, err := New(Config{Mode: ModeLease, NodeName: "edge-1", PoolName: "p", Addr: "10.0.0.1:10269",
		Cloud: func(*http.Request) (*http.Response, error) { return nil, fmt.Errorf("offline") }})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	f := &fakeLeases{at: now}
	f.set("edge-1", "10.0.0.1:10269", now, false)
	f.set("zzz-intruder", "10.9.9.9:10269", now, false)
	np := NewStore(nodePoolResource("p"))
	e := &elector{p: p, passed: map[string]string{}, nodePool: np, list: f.list, canServe: servable, settleFor: new(time.Duration)}
	np.replace([]*object{nodePoolNamed(t, "p", 7, "edge-1", "edge-1", "zzz-intruder")}, 7, "apps.openyurt.io/v1beta2", "NodePool")
	e.round(context.Background(), now)
	if !p.leading {
		t.Fatalf("edge-1 does not lead: %q", p.leader)
	}
	w := httptest.NewRecorder()
	p.serveNotes(w, noteRequest(http.MethodPut, "zzz-intruder", NotesPath, make([]byte, MaxNoteBytes)))
	if w.Code != http.StatusForbidden {
		t.Fatalf("the intruder's 256 KiB note: %d, want 403", w.Code)
	}
	if s := p.notes.snapshot(); len(s.Notes) != 0 {
		t.Fatalf("notes kept: %d", len(s.Notes))
	}
}
