package cache

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"nodehub/wire"
)

// fakeClock makes a store's clock one the test moves.
func fakeClock(s *Store) *time.Time {
	now := time.Unix(1_800_000_000, 0)
	s.clock = func() time.Time { return now }
	return &now
}

// flashBytes is what the store wrote to its files: records and compaction.
func flashBytes(s *Store) int64 {
	st := s.Stats()
	return st.BytesWritten + st.CompactedBytes
}

func putLocal(s *Store, owner, resource, name string, body []byte) error {
	k := Key{Resource: Resource{Owner: owner, Version: "v1", Resource: resource}, Namespace: "default", Name: name}
	h := Header{ContentType: wire.MediaJSON, Name: name, Namespace: "default", UID: noise(16), ResourceVersion: "7", Local: true}
	return s.Put(k, &h, body)
}

// Issue 28: one pod re-creating one 2.9 MB event offline wrote 686 MiB in 30 s. The offline
// changes of the owners that are not the node's write at most 2 MiB of flash a minute: past their
// budget a change is refused with the time it would fit (429 Retry-After), one larger than the
// budget's burst for good; however many credentials the pod brings.
func TestPodOfflineWritesStayWithinTheFlashBudget(t *testing.T) {
	s := openStore(t)
	now := fakeClock(s)
	// The pod: a 2.9 MB event (incompressible) re-created every 2 s for a minute.
	w0 := flashBytes(s)
	for i := 0; i < 30; i++ {
		if err := putLocal(s, "flooder@sa", "events", "big", []byte(noise(2_900_000))); err == nil {
			t.Fatal("a 2.9 MB offline event of a pod was written: larger than the budget's burst")
		}
		*now = now.Add(2 * time.Second)
	}
	if w := flashBytes(s) - w0; w > 2<<20 {
		t.Fatalf("a pod re-creating a 2.9 MB event for a minute wrote %d bytes", w)
	}
	// Events within the burst, re-created every second for a minute: a few written, the rest
	// refused with the time they fit, which is true.
	*now = now.Add(10 * time.Minute)
	w0 = flashBytes(s)
	written, refused := 0, 0
	for start := *now; now.Sub(start) < time.Minute; *now = now.Add(time.Second) {
		err := putLocal(s, "flooder@sa", "events", "mid", []byte(noise(100<<10)))
		var be *BudgetError
		switch {
		case err == nil:
			written++
		case errors.As(err, &be) && be.RetryAfter > 0 && be.RetryAfter <= time.Minute:
			refused++
		default:
			t.Fatalf("offline event past the budget: %v", err)
		}
	}
	t.Logf("100 KiB events every second for a minute: %d written, %d refused, %d bytes", written, refused, flashBytes(s)-w0)
	if w := flashBytes(s) - w0; written == 0 || refused == 0 || w > 2<<20 {
		t.Fatalf("100 KiB events every second for a minute: %d written, %d refused, %d bytes", written, refused, w)
	}
	var be *BudgetError
	if err := putLocal(s, "flooder@sa", "events", "mid", []byte(noise(100<<10))); !errors.As(err, &be) {
		t.Fatalf("an event past the budget: %v", err)
	}
	*now = now.Add(be.RetryAfter)
	if err := putLocal(s, "flooder@sa", "events", "mid", []byte(noise(100<<10))); err != nil {
		t.Fatalf("the event after its Retry-After: %v", err)
	}
	// Twenty credentials, 60 KiB events every 2 s each: their budget together holds.
	*now = now.Add(10 * time.Minute)
	w0 = flashBytes(s)
	for start := *now; now.Sub(start) < time.Minute; *now = now.Add(2 * time.Second) {
		for o := 0; o < 20; o++ {
			_ = putLocal(s, fmt.Sprintf("flooder@cred-%d", o), "events", "e", []byte(noise(60<<10)))
		}
	}
	if w := flashBytes(s) - w0; w > 2<<20 {
		t.Fatalf("20 credentials' events for a minute wrote %d bytes", w)
	}
}

// The node's own clients never meet their budget: kubelet re-running 110 pods offline (five status
// updates of each, ten events) and then its lease, node status, pods' status and events for ten
// minutes at the rates it writes them.
func TestNodeOfflineWritesNeverMeetTheBudget(t *testing.T) {
	s := openStore(t)
	now := fakeClock(s)
	put := func(resource, name string, n int) {
		t.Helper()
		if err := putLocal(s, "kubelet", resource, name, []byte(noise(n))); err != nil {
			t.Fatalf("kubelet's offline %s %s at %v: %v", resource, name, now, err)
		}
	}
	for round := 0; round < 5; round++ {
		for p := 0; p < 110; p++ {
			put("pods", fmt.Sprintf("pod-%d", p), 12<<10)
			put("events", fmt.Sprintf("ev-%d-%d-a", p, round), 1<<10)
			put("events", fmt.Sprintf("ev-%d-%d-b", p, round), 1<<10)
			*now = now.Add(20 * time.Millisecond) // kubelet's 50 requests a second
		}
	}
	for tick := 0; tick < 60; tick++ { // every 10 s for 10 minutes
		put("leases", "edge-1", 600)
		put("nodes", "edge-1", 16<<10)
		put("pods", fmt.Sprintf("pod-%d", tick%110), 12<<10)
		for e := 0; e < 5; e++ {
			put("events", fmt.Sprintf("tick-%d-%d", tick, e), 1<<10)
		}
		*now = now.Add(10 * time.Second)
	}
}

// An offline change that changes nothing writes nothing: not over the cloud's copy, not over its
// own, not after a restart.
func TestUnchangedOfflineChangeWritesNothing(t *testing.T) {
	s := openStore(t)
	k := Key{Resource: Resource{Owner: "kubelet", Version: "v1", Resource: "nodes"}, Name: "edge-1"}
	body := []byte(`{"apiVersion":"v1","kind":"Node","metadata":{"name":"edge-1","resourceVersion":"5"},"status":{"images":"` + noise(4000) + `"}}`)
	h := func(local bool) *Header {
		return &Header{ContentType: wire.MediaJSON, APIVersion: "v1", Kind: "Node", Name: "edge-1", ResourceVersion: "5", Local: local}
	}
	if err := s.Put(k, h(false), body); err != nil {
		t.Fatal(err)
	}
	same := func(what string) {
		t.Helper()
		w0 := flashBytes(s)
		if err := s.Put(k, h(true), body); err != nil {
			t.Fatal(err)
		}
		if w := flashBytes(s) - w0; w != 0 {
			t.Fatalf("%s: an unchanged offline update wrote %d bytes", what, w)
		}
		if _, got, err := s.Get(k); err != nil || string(got) != string(body) {
			t.Fatalf("%s: the node reads back %v", what, err)
		}
	}
	same("over the cloud's copy")
	body = append(body[:len(body)-2:len(body)-2], `x"}}`...)
	w0 := flashBytes(s)
	if err := s.Put(k, h(true), body); err != nil || flashBytes(s) == w0 {
		t.Fatalf("a changed offline update was not written: %v", err)
	}
	same("over its own")
	s.Close()
	s2, err := Open(s.Path(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	s = s2
	same("after a restart")
}

// The per-owner buckets are bounded; the fullest goes first.
func TestWriteBudgetKeepsBoundedOwners(t *testing.T) {
	s := openStore(t)
	now := fakeClock(s)
	b := DefaultWriteBudget()
	b.MaxOwners = 4
	s.SetWriteBudget(b)
	for o := 0; o < 10; o++ {
		if err := putLocal(s, fmt.Sprintf("pod@cred-%d", o), "events", "e", []byte(noise(40<<10))); err != nil {
			t.Fatal(err)
		}
		*now = now.Add(time.Second)
	}
	if n := len(s.budget.owners); n > 4 {
		t.Fatalf("%d owners' buckets kept, want at most 4", n)
	}
}

// A node client that names itself anew with every write (its User-Agent is its owner) does not get
// a full bucket each time: the node's owners together are held to Nodes.
func TestNodeOwnersTogetherAreBounded(t *testing.T) {
	s := openStore(t)
	now := fakeClock(s)
	written, refused := 0, 0
	for i := 0; i < 400; i++ {
		err := putLocal(s, fmt.Sprintf("agent%d", i), "events", fmt.Sprintf("ev-%d", i), []byte(noise(1<<20)))
		var be *BudgetError
		switch {
		case err == nil:
			written++
		case errors.As(err, &be):
			refused++
		default:
			t.Fatalf("write %d: %v", i, err)
		}
		*now = now.Add(100 * time.Millisecond) // 40 s in all
	}
	// 64 MiB at once and 16 MiB a minute: at most ~75 MiB in 40 s (records are compressed:
	// noise is not).
	if written > 80 || refused == 0 {
		t.Fatalf("400 owners' 1 MiB writes in 40 s: %d written, %d refused; want ≤ 80 written", written, refused)
	}
}
