package cache

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"nodehub/wire"
)

func slicePut(t *testing.T, s *Store, owner, name, rv string, pad int) Key {
	t.Helper()
	k := Key{Resource: Resource{Owner: owner, Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}, Namespace: "ns", Name: name}
	body := fmt.Sprintf(`{"kind":"EndpointSlice","metadata":{"name":%q,"namespace":"ns","resourceVersion":%q},"pad":%q}`, name, rv, strings.Repeat("e", pad))
	h := Header{ContentType: wire.MediaJSON, Name: name, Namespace: "ns", ResourceVersion: rv}
	if err := s.Put(k, &h, []byte(body)); err != nil {
		t.Fatal(err)
	}
	return k
}

func TestTwoOwnersReadingTheSameBytesStoreThemOnce(t *testing.T) {
	s := openStore(t)
	slicePut(t, s, "kube-proxy", "a", "5", 2000)
	w0 := s.Stats().BytesWritten
	k := slicePut(t, s, "coredns", "a", "5", 2000)
	if d := s.Stats().BytesWritten - w0; d > 100 {
		t.Fatalf("the second owner of identical bytes wrote %d bytes, want a small ref", d)
	}
	it, err := s.GetObject(k)
	if err != nil || it.Header.ResourceVersion != "5" || !strings.Contains(string(it.Body), `"name":"a"`) {
		t.Fatalf("coredns reads %v %v", it.Header, err)
	}
	// One owner moves on: the other still reads its version.
	slicePut(t, s, "kube-proxy", "a", "6", 2000)
	if it, _ := s.GetObject(k); it.Header.ResourceVersion != "5" {
		t.Fatalf("coredns's copy changed with kube-proxy's: %v", it.Header.ResourceVersion)
	}
	// And both survive a compaction and a restart.
	l, _ := s.logFor(k.Resource, false)
	l.mu.Lock()
	if err := l.compact(); err != nil {
		t.Fatal(err)
	}
	l.mu.Unlock()
	dir := s.Path()
	s.Close()
	s, err = Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for owner, rv := range map[string]string{"coredns": "5", "kube-proxy": "6"} {
		k.Owner = owner
		if it, err := s.GetObject(k); err != nil || it.Header.ResourceVersion != rv {
			t.Fatalf("%s after compaction and restart: %v %v", owner, it.Header, err)
		}
	}
}

func TestCompactionKeepsEverythingLiveAndBoundsTheFile(t *testing.T) {
	s := openStore(t)
	const objects = 200
	want := map[string]string{}
	for round := 0; round < 60; round++ {
		for i := 0; i < objects; i++ {
			name := fmt.Sprint("s", i)
			rv := fmt.Sprint(round*objects + i + 1)
			slicePut(t, s, "kube-proxy", name, rv, 1000)
			want[name] = rv
		}
	}
	st := s.Stats()
	if st.Compactions == 0 {
		t.Fatal("no compaction after 60 rewrites of every object")
	}
	fi, _ := os.Stat(filepath.Join(s.Path(), logDir, "endpointslices.v1.discovery.k8s.io.log"))
	if live := s.Size(); fi.Size() > 4*live+(1<<20)+(64<<10) {
		t.Fatalf("log of %d bytes for %d live bytes: dead bytes not bounded", fi.Size(), live)
	}
	if amp := float64(st.CompactedBytes) / float64(st.BytesWritten); amp > 0.36 {
		t.Fatalf("compaction wrote %.2f bytes per byte appended, want ≤ 1/3", amp)
	}
	r := Resource{Owner: "kube-proxy", Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}
	n := 0
	s.Keys(r, "", func(k Key) error {
		it, err := s.GetObject(k)
		if err != nil || it.Header.ResourceVersion != want[k.Name] {
			t.Fatalf("%s: %v %v, want rv %s", k.Name, it.Header, err, want[k.Name])
		}
		n++
		return nil
	})
	if n != objects {
		t.Fatalf("%d objects after compactions, want %d", n, objects)
	}
}

func TestRelistAtUnchangedResourceVersionWritesNothing(t *testing.T) {
	s := openStore(t)
	m := newManager(s)
	body := listBody(t, "50", pod("a", "edge-1", "1", nil), pod("b", "edge-1", "2", nil))
	respond(t, m, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1", "kubelet", body)
	w0 := s.Stats().BytesWritten
	respond(t, m, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1", "kubelet", body)
	if d := s.Stats().BytesWritten - w0; d != 0 {
		t.Fatalf("a re-list at the same resourceVersion wrote %d bytes", d)
	}
}

func TestHistoricalListsDeleteNothingNewer(t *testing.T) {
	s := openStore(t)
	m := newManager(s)
	respond(t, m, "GET", "/api/v1/pods", "kubelet", listBody(t, "50", pod("a", "edge-1", "10", nil), pod("b", "edge-1", "40", nil)))
	// A watch brings c (rv 60) and a new version of b.
	respond(t, m, "GET", "/api/v1/namespaces/default/pods/c", "kubelet", podJSON(t, pod("c", "edge-1", "60", nil)))
	respond(t, m, "GET", "/api/v1/namespaces/default/pods/b", "kubelet", podJSON(t, pod("b", "edge-1", "55", nil)))
	// A stale rv=0 answer from a lagging watch cache at rv 45, without c.
	respond(t, m, "GET", "/api/v1/pods?resourceVersion=0", "kubelet", listBody(t, "45", pod("a", "edge-1", "10", nil), pod("b", "edge-1", "40", nil)))
	got, _ := names(t, s, "kubelet", "", "", "")
	if strings.Join(got, ",") != "a,b,c" {
		t.Fatalf("a stale list deleted a newer object: %v", got)
	}
	k := Key{Resource: Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}, Namespace: "default", Name: "b"}
	if it, _ := s.GetObject(k); it.Header == nil || it.Header.ResourceVersion != "55" {
		t.Fatal("a stale list brought an older version back")
	}
	// An exact historical list is neither cached nor reconciled.
	r, _ := http.NewRequest("GET", "http://hub/api/v1/pods?resourceVersion=20&resourceVersionMatch=Exact", nil)
	r.Header.Set("User-Agent", "kubelet/1")
	ri, _ := wire.ParseRequest(r)
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {wire.MediaJSON}}, Body: io.NopCloser(bytes.NewReader(listBody(t, "20", pod("a", "edge-1", "10", nil))))}
	if m.Tee(ri, "kubelet", resp) != nil {
		t.Fatal("an Exact (historical) list is cached")
	}
	// A current list without c deletes it.
	respond(t, m, "GET", "/api/v1/pods", "kubelet", listBody(t, "70", pod("a", "edge-1", "10", nil), pod("b", "edge-1", "55", nil)))
	if got, _ := names(t, s, "kubelet", "", "", ""); strings.Join(got, ",") != "a,b" {
		t.Fatalf("a current list did not reconcile: %v", got)
	}
}

func TestFailedWriteMarksTheListIncomplete(t *testing.T) {
	s := openStore(t)
	m := newManager(s)
	respond(t, m, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1", "kubelet", listBody(t, "50", pod("a", "edge-1", "1", nil)))
	if _, res := names(t, s, "kubelet", "", "", "spec.nodeName=edge-1"); res.Partial {
		t.Fatal("complete list reads partial")
	}
	s.hook = func(string) error { return syscall.ENOSPC }
	respond(t, m, "GET", "/api/v1/namespaces/default/pods/b", "kubelet", podJSON(t, pod("b", "edge-1", "60", nil)))
	s.hook = nil
	if _, res := names(t, s, "kubelet", "", "", "spec.nodeName=edge-1"); !res.Partial {
		t.Fatal("a list that lost a write still reads complete")
	}
}

func TestOfflineChangesStayWithinTheOwnersQuota(t *testing.T) {
	s := openStore(t)
	s.SetMaxBytes(800 << 10)        // an owner gets 100 KiB
	s.SetWriteBudget(WriteBudget{}) // the quota alone, not the bytes a minute
	r := Resource{Owner: "pod@x", Group: "", Version: "v1", Resource: "events"}
	for i := 0; i < 100; i++ {
		k := Key{Resource: r, Namespace: "default", Name: fmt.Sprintf("ev-%03d", i)}
		h := Header{ContentType: wire.MediaJSON, Name: k.Name, Namespace: "default", Local: true}
		if err := s.Put(k, &h, []byte(noise(10<<10))); err != nil {
			t.Fatal(err)
		}
	}
	if sz := s.Size(); sz > 110<<10 {
		t.Fatalf("100 offline events of 10 KiB take %d bytes, past the owner's quota", sz)
	}
	// The newest are kept, the oldest collected.
	if _, err := s.GetObject(Key{Resource: r, Namespace: "default", Name: "ev-099"}); err != nil {
		t.Fatal("the newest offline event was not kept")
	}
	if _, err := s.GetObject(Key{Resource: r, Namespace: "default", Name: "ev-000"}); err == nil {
		t.Fatal("the oldest offline event was not collected")
	}
	big := Key{Resource: r, Namespace: "default", Name: "big"}
	if err := s.Put(big, &Header{Name: "big", Local: true}, []byte(noise(200<<10))); !errors.Is(err, ErrFull) {
		t.Fatalf("an offline change larger than the quota: %v", err)
	}
	fi, _ := os.Stat(filepath.Join(s.Path(), logDir, "events.v1.core.log"))
	if fi.Size() > 1<<20 {
		t.Fatalf("the log of a 100 KiB quota takes %d bytes", fi.Size())
	}
}

func TestTornTailsLeaveAPrefix(t *testing.T) {
	src := t.TempDir()
	s, err := Open(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ends []int64 // the log's size after each object
	path := filepath.Join(src, logDir, "endpointslices.v1.discovery.k8s.io.log")
	for i := 0; i < 30; i++ {
		slicePut(t, s, "kube-proxy", fmt.Sprint("s", i%7), fmt.Sprint(i+1), 300+i*37)
		fi, _ := os.Stat(path)
		ends = append(ends, fi.Size())
	}
	s.Close()
	full, _ := os.ReadFile(path)
	for cut := int64(logHeaderLen); cut < int64(len(full)); cut += 53 {
		for _, tail := range [][]byte{nil, []byte(frameMagic + "\x00\x00\x01\x00garbage"), make([]byte, 4096)} {
			dir := t.TempDir()
			os.MkdirAll(filepath.Join(dir, logDir), 0o700)
			os.WriteFile(filepath.Join(dir, logDir, filepath.Base(path)), append(append([]byte{}, full[:cut]...), tail...), 0o600)
			s, err := Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			// The objects are those of the longest prefix of whole records.
			whole := 0
			for whole < len(ends) && ends[whole] <= cut {
				whole++
			}
			want := map[string]string{}
			for i := 0; i < whole; i++ {
				want[fmt.Sprint("s", i%7)] = fmt.Sprint(i + 1)
			}
			r := Resource{Owner: "kube-proxy", Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}
			got := map[string]string{}
			s.Keys(r, "", func(k Key) error {
				it, err := s.GetObject(k)
				if err != nil {
					t.Fatalf("cut %d: %s unreadable: %v", cut, k.Name, err)
				}
				got[k.Name] = it.Header.ResourceVersion
				return nil
			})
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("cut at %d (+%d bytes of tail): %v, want %v", cut, len(tail), got, want)
			}
			if s.Stats().Corrupt != 0 {
				t.Fatalf("cut at %d: a torn tail counted as corruption", cut)
			}
			s.Close()
			if fi, _ := os.Stat(filepath.Join(dir, logDir, filepath.Base(path))); whole > 0 && fi.Size() != ends[whole-1] {
				t.Fatalf("cut at %d: the torn tail was not cut off (%d bytes, want %d)", cut, fi.Size(), ends[whole-1])
			}
		}
	}
}

func TestOldNodehubLayoutIsMigrated(t *testing.T) {
	root := t.TempDir()
	k := Key{Resource: Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}, Namespace: "default", Name: "p"}
	h := Header{ContentType: wire.MediaJSON, Name: "p", Namespace: "default", ResourceVersion: "7", Fields: map[string]string{"spec.nodeName": "edge-1"}}
	data, _ := encodeFile(&h, podJSON(t, pod("p", "edge-1", "7", nil)))
	os.MkdirAll(filepath.Join(root, "kubelet/pods.v1.core/default"), 0o700)
	os.MkdirAll(filepath.Join(root, "kubelet/pods.v1.core/.lists"), 0o700)
	os.WriteFile(filepath.Join(root, k.Path()), data, 0o600)
	os.WriteFile(filepath.Join(root, "kubelet/pods.v1.core/.lists", "0123abcd"),
		[]byte(`{"fieldSelector":"spec.nodeName=edge-1","rv":"9","complete":true,"keys":["default/p"],"av":"v1","kind":"Pod"}`), 0o600)
	// Before the hub opens it, a tool reads it by its old path.
	if _, _, err := ReadFile(filepath.Join(root, k.Path())); err != nil {
		t.Fatal(err)
	}
	s, err := Open(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, res := names(t, s, "kubelet", "", "", "spec.nodeName=edge-1")
	if strings.Join(got, ",") != "p" || res.Record == nil || !res.Record.Complete || res.Record.ResourceVersion != "9" {
		t.Fatalf("old layout: %v %+v", got, res.Record)
	}
	if _, err := os.Stat(filepath.Join(root, "kubelet")); !os.IsNotExist(err) {
		t.Fatal("the old layout stayed")
	}
	// And by the same path once in the log.
	if _, _, err := ReadFile(filepath.Join(root, k.Path())); err != nil {
		t.Fatal(err)
	}
}
