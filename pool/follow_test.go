package pool

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"nodehub/wire"
)

// Follow hands its follower the store's objects, then each change, as the store's bytes; a store
// emptied past its bounds ends it with ErrExpired.
func TestStoreFollow(t *testing.T) {
	st := NewStore(Resource{Version: "v1", Resource: "services"})
	if err := st.Follow(context.Background(), Follower{}); err == nil {
		t.Fatal("followed a store that never listed")
	}
	st.replace([]*object{svc("a", 10, "x"), svc("b", 11, "y")}, 12, "v1", "Service")

	var mu sync.Mutex
	var got []string
	add := func(s string) {
		mu.Lock()
		got = append(got, s)
		mu.Unlock()
	}
	seen := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			mu.Lock()
			s := strings.Join(got, ";")
			mu.Unlock()
			if s == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("followed %q, want %q", s, want)
			}
		}
	}
	name := func(raw []byte) string {
		m, err := wire.ExtractMeta(raw, "services")
		if err != nil {
			t.Error(err)
		}
		return m.Name + "@" + m.ResourceVersion
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- st.Follow(ctx, Follower{
			List: func(items [][]byte) {
				var names []string
				for _, it := range items {
					names = append(names, name(it))
				}
				add("list " + strings.Join(names, ","))
			},
			Event: func(typ string, raw []byte) { add(typ + " " + name(raw)) },
		})
	}()
	seen("list a@10,b@11")
	st.apply(wire.EventModified, svc("a", 13, "x"))
	st.apply(wire.EventDeleted, svc("b", 14, "y"))
	st.bookmark(15)
	seen("list a@10,b@11;MODIFIED a@13;DELETED b@14")
	// A re-list's difference comes as events.
	st.replace([]*object{svc("a", 13, "x"), svc("c", 16, "z")}, 17, "v1", "Service")
	seen("list a@10,b@11;MODIFIED a@13;DELETED b@14;ADDED c@16")

	st.overflow()
	select {
	case err := <-done:
		if !errors.Is(err, ErrExpired) {
			t.Fatalf("a store emptied past its bounds ended the follower with %v, want ErrExpired", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a store emptied past its bounds did not end the follower")
	}
	cancel()

	// ctx ends it.
	st.replace([]*object{svc("a", 13, "x")}, 18, "v1", "Service")
	ctx, cancel = context.WithCancel(context.Background())
	go func() { done <- st.Follow(ctx, Follower{List: func([][]byte) {}, Event: func(string, []byte) {}}) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("ended by its context: %v", err)
	}
}
