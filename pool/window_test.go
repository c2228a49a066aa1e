package pool

import (
	"fmt"
	"net/http"
	"testing"
)

// reachable sums what the store's objects and its window keep alive, each object once: what the
// store costs in memory, whatever its accounting says.
func reachable(s *Store) (int64, int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	seen := map[*object]bool{}
	var b int64
	add := func(o *object) {
		if o != nil && !seen[o] {
			seen[o] = true
			b += int64(len(o.raw))
		}
	}
	for _, o := range s.objs {
		add(o)
	}
	for _, ev := range s.events {
		add(ev.obj)
	}
	return b, len(seen)
}

func services(prefix string, n, rv int) ([]*object, int64) {
	out := make([]*object, n)
	var size int64
	for i := range out {
		out[i] = svc(fmt.Sprintf("%s-%03d", prefix, i), rv+i, "x")
		size += int64(len(out[i].raw))
	}
	return out, size
}

// A re-sync that replaces every object keeps, in its event window, the older copies (or the
// deleted objects): they count against the store's bound with the objects, so the store never
// holds more than its bound; a watch behind the window trimmed for it gets 410 and re-lists.
func TestWindowCountsAgainstTheStoreBound(t *testing.T) {
	st := NewStore(Resource{Version: "v1", Resource: "services"})
	st.MaxEvents, st.MaxEventBytes = 1000, 1<<20 // the window's own bounds are not what limits here
	first, size := services("a", 40, 1000)
	st.MaxBytes, st.MaxObjects = size*3/2, 60
	check := func(step string) {
		t.Helper()
		b, n := reachable(st)
		if b > st.MaxBytes || n > st.MaxObjects {
			t.Fatalf("%s: the store keeps %d bytes in %d objects, past its bound of %d bytes, %d objects", step, b, n, st.MaxBytes, st.MaxObjects)
		}
		if hb, hn := st.Held(); hb != b || hn != n {
			t.Fatalf("%s: Held says %d bytes, %d objects; %d, %d are kept", step, hb, hn, b, n)
		}
	}
	st.replace(first, 1100, "v1", "Service")
	check("first list")
	before := st.ResourceVersion()
	code, _ := watchBody(t, st, "resourceVersion=1100&timeoutSeconds=0")
	if code != http.StatusOK {
		t.Fatalf("watch from the store's resourceVersion: %d", code)
	}
	_, _, cursor, _ := st.snapshot()

	// Every object modified: each MODIFIED event holds the new copy (the store's); the older ones
	// are garbage.
	modified, _ := services("a", 40, 2000)
	st.replace(modified, 2100, "v1", "Service")
	check("every object modified")
	// Every object replaced by another: the DELETED events hold the old objects, past the bound.
	renamed, _ := services("b", 40, 3000)
	st.replace(renamed, 3100, "v1", "Service")
	check("every object replaced")
	for i := 0; i < 3; i++ {
		again, _ := services(fmt.Sprintf("c%d", i), 40, 4000+i*100)
		st.replace(again, uint64(4099+i*100), "v1", "Service")
		check(fmt.Sprintf("re-sync %d", i))
	}
	if code, body := watchBody(t, st, fmt.Sprintf("resourceVersion=%d", before)); code != http.StatusGone {
		t.Fatalf("a watch from before the trimmed window: %d %s", code, body)
	}
	if _, _, _, err := st.next(cursor); err != ErrExpired {
		t.Fatalf("an open watch behind the trimmed window: %v, want ErrExpired", err)
	}
	// Events one by one after that: deletions keep what they delete, within the bound too.
	for i := 0; i < 40; i++ {
		o := svc(fmt.Sprintf("c2-%03d", i), 5000+i, "x")
		st.apply("DELETED", o)
		check(fmt.Sprintf("deletion %d", i))
	}
	if _, _, n := st.Size(); n != 0 {
		t.Fatalf("%d objects left", n)
	}
}
