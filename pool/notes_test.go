package pool

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

func noteRequest(method, node, path string, body []byte) *http.Request {
	r := httptest.NewRequest(method, path, bytes.NewReader(body))
	r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}}}}}
	return r
}

// A leader files each member's note under the node its certificate names, answers reads of them
// all, and bounds them: a note's size, the nodes, and a note not refreshed goes.
func TestNotesFiledByCertificateAndBounded(t *testing.T) {
	p := &Pool{notes: newNoteBoard(), changed: make(chan struct{})}
	p.notes.setMembers(nil) // any node's (self-declared membership)
	w := httptest.NewRecorder()
	p.serveNotes(w, noteRequest(http.MethodPut, "edge-a", NotesPath, []byte(`[1]`)))
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("a follower took a note: %d", w.Code)
	}
	p.leading = true
	put := func(node string, doc []byte) int {
		w := httptest.NewRecorder()
		p.serveNotes(w, noteRequest(http.MethodPut, node, NotesPath, doc))
		return w.Code
	}
	if c := put("edge-a", []byte(`{"node":"edge-z"}`)); c != http.StatusNoContent {
		t.Fatalf("put: %d", c)
	}
	if c := put("edge-b", bytes.Repeat([]byte("x"), MaxNoteBytes+1)); c != http.StatusRequestEntityTooLarge {
		t.Fatalf("an oversized note: %d", c)
	}
	w = httptest.NewRecorder()
	p.serveNotes(w, noteRequest(http.MethodGet, "edge-c", NotesPath+"?after=0", nil))
	var ans notesAnswer
	if err := json.Unmarshal(w.Body.Bytes(), &ans); err != nil || len(ans.Notes) != 1 || string(ans.Notes["edge-a"]) != `{"node":"edge-z"}` {
		t.Fatalf("notes %s (%v)", w.Body.String(), err)
	}
	// A read of what the member has already waits for the next change.
	done := make(chan notesAnswer)
	go func() {
		w := httptest.NewRecorder()
		p.serveNotes(w, noteRequest(http.MethodGet, "edge-c", NotesPath+"?after="+strconv.FormatUint(ans.Gen, 10), nil))
		var a notesAnswer
		_ = json.Unmarshal(w.Body.Bytes(), &a)
		done <- a
	}()
	put("edge-b", []byte(`[2]`))
	select {
	case a := <-done:
		if len(a.Notes) != 2 {
			t.Fatalf("after a change: %v", a.Notes)
		}
	case <-time.After(notePoll + 5*time.Second):
		t.Fatal("a waiting read was not answered")
	}
	for i := 0; i < MaxNoteNodes; i++ {
		put(strings.Repeat("n", 1+i%7)+string(rune('a'+i%26))+strings.Repeat("z", i/182), []byte(`[]`))
	}
	p.notes.mu.Lock()
	n := len(p.notes.pool)
	p.notes.mu.Unlock()
	if n > MaxNoteNodes {
		t.Fatalf("%d nodes' notes kept, bound %d", n, MaxNoteNodes)
	}
	p.notes.expire(time.Now().Add(noteTTL + time.Second))
	if s := p.notes.snapshot(); len(s.Notes) != 0 {
		t.Fatalf("notes not refreshed kept: %d", len(s.Notes))
	}
}
