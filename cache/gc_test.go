package cache

import (
	"testing"
	"time"

	"nodehub/wire"
)

func put(t *testing.T, s *Store, owner, resource, ns, name string) Key {
	t.Helper()
	k := Key{Resource: Resource{Owner: owner, Version: "v1", Resource: resource}, Namespace: ns, Name: name}
	if err := s.Put(k, &Header{ContentType: wire.MediaJSON, Name: name, Namespace: ns}, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	return k
}

func TestGC(t *testing.T) {
	s := openStore(t)
	now := time.Now()
	past := now.Add(-3 * time.Hour)
	s.clock = func() time.Time { return past }
	old := put(t, s, "kubelet", "events", "default", "old")
	pod := put(t, s, "kubelet", "pods", "default", "p")
	s.clock = nil
	fresh := put(t, s, "kubelet", "events", "default", "fresh")
	if n, err := s.RemoveOlder("events", 2*time.Hour, now); err != nil || n != 1 {
		t.Fatalf("RemoveOlder removed %d: %v", n, err)
	}
	for k, want := range map[Key]bool{old: false, fresh: true, pod: true} {
		if _, err := s.GetObject(k); (err == nil) != want {
			t.Errorf("%s cached=%v, want %v", k.Path(), err == nil, want)
		}
	}

	put(t, s, "flanneld", "nodes", "", "n")
	put(t, s, "flanneld@abc", "nodes", "", "n")
	other := put(t, s, "flanneld2", "nodes", "", "n")
	if n, err := s.DropOwner("flanneld"); err != nil || n != 2 {
		t.Fatalf("DropOwner removed %d owners: %v", n, err)
	}
	if _, err := s.GetObject(other); err != nil {
		t.Fatal("DropOwner removed another component")
	}
	if _, err := s.DropOwner("../x"); err == nil {
		t.Fatal("DropOwner took a path")
	}

	s.clock = func() time.Time { return past }
	put(t, s, "gone-agent", "nodes", "", "n")
	s.clock = nil
	gone, err := s.AgeOut(time.Hour, now)
	if err != nil || len(gone) != 1 || gone[0] != "gone-agent" {
		t.Fatalf("AgeOut: %v %v", gone, err)
	}
}

func TestMaxBytesStopsNewObjectsOnly(t *testing.T) {
	s := openStore(t)
	m := newManager(s)
	skipped := 0
	m.Writer.OnFull = func(Resource) { skipped++ }
	respond(t, m, "GET", "/api/v1/namespaces/default/pods/a", "kubelet", podJSON(t, pod("a", "edge-1", "1", nil)))
	if s.Size() <= 0 {
		t.Fatal("size not counted")
	}
	m.Writer.MaxBytes = s.Size() // full now
	respond(t, m, "GET", "/api/v1/namespaces/default/pods/b", "kubelet", podJSON(t, pod("b", "edge-1", "2", nil)))
	respond(t, m, "GET", "/api/v1/namespaces/default/pods/a", "kubelet", podJSON(t, pod("a", "edge-1", "3", nil)))
	if skipped != 1 {
		t.Fatalf("%d objects skipped, want 1 (the new one)", skipped)
	}
	k := Key{Resource: Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}, Namespace: "default"}
	k.Name = "b"
	if _, err := s.GetObject(k); err == nil {
		t.Fatal("a new object was cached past the limit")
	}
	k.Name = "a"
	if it, err := s.GetObject(k); err != nil || it.Header.ResourceVersion != "3" {
		t.Fatalf("an existing object stopped being updated: %v", err)
	}
	before := s.Size()
	s.Delete(k)
	if s.Size() >= before {
		t.Fatal("delete not subtracted from the size")
	}
}
