package cache

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"nodehub/wire"
)

// A tenant's object whose bytes hold a whole record frame (a Secret's data, stored raw because it
// does not compress) that names kubelet's Secret; the log's tail torn inside the tenant's record,
// as a power cut does. At the next start kubelet's Secret must be kubelet's (issue 23: the resync
// took the forged record). Once with a frame whose checksum is plain CRC-32C (all a tenant can
// compute: the salt is in the log, which no client reads), once with one whose checksum holds
// (as if the salt were known) but whose chain does not reach the end of the file.
func TestTornTailDoesNotResyncOntoARecordInsideAnObject(t *testing.T) {
	for _, knowsSalt := range []bool{false, true} {
		t.Run(fmt.Sprintf("salt known %v", knowsSalt), func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			r := Resource{Owner: "kubelet", Version: "v1", Resource: "secrets"}
			kk := Key{Resource: r, Namespace: "kube-system", Name: "kubelet-secret"}
			if err := s.Put(kk, &Header{ContentType: wire.MediaJSON, Namespace: "kube-system", Name: "kubelet-secret", ResourceVersion: "5"}, []byte(`{"data":{"token":"kubelet's own"}}`)); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, logDir, "secrets.v1.core.log")
			file, _ := os.ReadFile(path)
			var seed uint32
			if knowsSalt {
				seed = saltSeed(file[len(logMagic)+1 : logHeaderLen])
			}
			// The forged record: kubelet's Secret with the attacker's data, at a newer version.
			fh := (&Header{ContentType: wire.MediaJSON, Namespace: "kube-system", Name: "kubelet-secret", ResourceVersion: "9"}).appendTo(nil)
			forged := putPayload(nil, "kubelet", 1, "kube-system", "kubelet-secret", fh, 0, []byte(`{"data":{"token":"ATTACKER"}}`))
			ff := make([]byte, frameLen+len(forged))
			copy(ff[frameLen:], forged)
			copy(ff, frameMagic)
			binary.BigEndian.PutUint32(ff[4:], uint32(len(forged)))
			if knowsSalt {
				binary.BigEndian.PutUint32(ff[8:], crc32.Update(seed, crcTable, forged))
			} else {
				binary.BigEndian.PutUint32(ff[8:], crc32.Checksum(forged, crcTable))
			}
			junk := make([]byte, 8192)
			_, _ = rand.Read(junk)
			body := append(append(append([]byte{}, junk[:4096]...), ff...), junk[4096:]...)
			tenant := Key{Resource: Resource{Owner: "app@tenant", Version: "v1", Resource: "secrets"}, Namespace: "tenant", Name: "innocent"}
			if err := s.Put(tenant, &Header{ContentType: wire.MediaProtobuf, Namespace: "tenant", Name: "innocent", ResourceVersion: "7"}, body); err != nil {
				t.Fatal(err)
			}
			s.Close()
			file, _ = os.ReadFile(path)
			at := bytes.Index(file, ff)
			if at < 0 {
				t.Fatal("the tenant's record was not stored raw: the test proves nothing")
			}
			cut := at + len(ff) // the tear: the forged frame is the last whole thing in the file
			if knowsSalt {
				cut += 100 // and some of the tenant's bytes after it: its chain does not reach the end
			}
			if err := os.Truncate(path, int64(cut)); err != nil {
				t.Fatal(err)
			}
			s, err = Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			it, err := s.GetObject(kk)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(it.Body, []byte("ATTACKER")) || it.Header.ResourceVersion != "5" {
				t.Fatalf("after a torn tail kubelet's Secret is the attacker's: %s (rv %s)", it.Body, it.Header.ResourceVersion)
			}
			if _, err := s.GetObject(tenant); err == nil {
				t.Fatal("the torn record was read")
			}
		})
	}
}

// A log written by the version before the salt (header version 1, plain CRC-32C) loads, and is
// rewritten with a salt at start; its objects and lists read back the same.
func TestVersion1LogIsReadAndRewritten(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, logDir), 0o700); err != nil {
		t.Fatal(err)
	}
	file := []byte(logMagic + "\x01")
	h := (&Header{ContentType: wire.MediaJSON, Namespace: "default", Name: "a", ResourceVersion: "3"}).appendTo(nil)
	file = append(file, frame(putPayload(nil, "kubelet", 1, "default", "a", h, 0, []byte(`{"metadata":{"name":"a"}}`)), 0)...)
	file = append(file, frame(listPayload(nil, "kubelet", 1, listScope{"", "", ""}, []byte(`{"resourceVersion":"3","complete":true,"keys":["default/a"]}`)), 0)...)
	path := filepath.Join(dir, logDir, "pods.v1.core.log")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, res := names(t, s, "kubelet", "", "", "")
	if len(got) != 1 || got[0] != "a" || res.Partial {
		t.Fatalf("a version 1 log reads %v partial %v", got, res.Partial)
	}
	s.Close()
	b, _ := os.ReadFile(path)
	if len(b) < logHeaderLen || string(b[:len(logMagic)]) != logMagic || b[len(logMagic)] != logV2 {
		t.Fatalf("the version 1 log was not rewritten: header %q", b[:min(len(b), logHeaderLen)])
	}
	s, err = Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, res := names(t, s, "kubelet", "", "", ""); len(got) != 1 || res.Partial {
		t.Fatalf("after the rewrite: %v partial %v", got, res.Partial)
	}
}

// A pod with 14,000 labels (1.2 MB, a valid object) is cached and read back, also after a
// restart: its header may be as large as the objects nodehub accepts (issue 23: it was cached but
// never readable, so kubelet's offline pod list was 503 for good, and after a restart whole
// without the pod).
func TestObjectWithMegabytesOfLabelsReadsBack(t *testing.T) {
	s := openStore(t)
	m := newManager(s)
	labels := map[string]string{}
	for i := 0; i < 14000; i++ {
		labels[fmt.Sprintf("example.com/label-%05d", i)] = fmt.Sprintf("value-%060d", i)
	}
	big := pod("big", "edge-1", "2", labels)
	if b := podJSON(t, big); len(b) < 1<<20 {
		t.Fatalf("the pod is %d bytes: the test proves nothing", len(b))
	}
	respond(t, m, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1", "kubelet", listBody(t, "10", pod("a", "edge-1", "1", nil), big))
	check := func(s *Store, when string) {
		got, res := names(t, s, "kubelet", "", "", "spec.nodeName=edge-1")
		if res.Partial || fmt.Sprint(got) != "[a big]" {
			t.Fatalf("%s: kubelet's pods %v partial %v, want [a big] whole", when, got, res.Partial)
		}
	}
	check(s, "cached")
	s2 := reopen(t, s)
	check(s2, "after a restart")
}

// A put record that passes its checksum but whose object cannot be opened (a header past the
// bound, an unknown flag) is not applied at load, and its resource's lists are incomplete: the
// pod it held is missing, so kubelet's pod list is not whole.
func TestUnopenableRecordAtLoadMarksListsIncomplete(t *testing.T) {
	s := openStore(t)
	m := newManager(s)
	respond(t, m, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1", "kubelet", listBody(t, "10", pod("a", "edge-1", "1", nil)))
	l, _ := s.logFor(Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}, false)
	h := (&Header{ContentType: wire.MediaJSON, Namespace: "default", Name: "b", ResourceVersion: "11", Fields: map[string]string{"spec.nodeName": "edge-1"}}).appendTo(nil)
	l.mu.Lock()
	rb := putPayload(make([]byte, frameLen), "kubelet", 1, "default", "b", h, 0x80, podJSON(t, pod("b", "edge-1", "11", nil)))
	err := l.writeRaw(rb, &rec{rv: "11"}) // as a newer hub's flag, or a bit flipped before the checksum
	l.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	s2 := reopen(t, s)
	if got, res := names(t, s2, "kubelet", "", "", "spec.nodeName=edge-1"); !res.Partial {
		t.Fatalf("a list whose pod b could not be opened at load reads whole: %v", got)
	}
}
