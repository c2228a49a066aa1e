package cache

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"nodehub/wire"
)

// plantHeads is n random bytes with a frame head every stride bytes, each announcing a random
// length that ends its record before the n bytes' end plus after.
func plantHeads(rng *rand.Rand, n, stride, after int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	for i := 0; i+frameLen <= n; i += stride {
		copy(b[i:], frameMagic)
		binary.BigEndian.PutUint32(b[i+4:], uint32(rng.IntN(n-i-frameLen+after+1)))
	}
	return b
}

// readChars is what the process has read from files so far (/proc/self/io), or -1.
func readChars(t *testing.T) int64 {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "rchar: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return -1
}

// A tenant's object (a Secret's data, stored raw because it does not compress) holds a frame head
// every 16 bytes, each announcing a record that ends inside the object; the log's tail is torn
// inside the object. Opening the cache reads the log a few times over, not what every head
// announces (issue 28: each head's length was read and checksummed, quadratic: 18.6 s for 1 MiB),
// and keeps kubelet's objects written before it.
func TestTornTailInsideObjectOfFrameHeadsIsBounded(t *testing.T) {
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
	rng := rand.New(rand.NewPCG(3, 4))
	body := plantHeads(rng, 256<<10, 32, 0)
	tenant := Key{Resource: Resource{Owner: "app@tenant", Version: "v1", Resource: "secrets"}, Namespace: "tenant", Name: "heads"}
	if err := s.Put(tenant, &Header{ContentType: wire.MediaProtobuf, Namespace: "tenant", Name: "heads", ResourceVersion: "7"}, body); err != nil {
		t.Fatal(err)
	}
	s.Close()
	path := filepath.Join(dir, logDir, "secrets.v1.core.log")
	file, _ := os.ReadFile(path)
	at := bytes.Index(file, body)
	if at < 0 {
		t.Fatal("the tenant's object was not stored raw: the test proves nothing")
	}
	// Torn 100 bytes before the object's end: every head's record still fits in the file.
	size := int64(at + len(body) - 100)
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
	before := readChars(t)
	if before < 0 {
		t.Skip("no /proc/self/io")
	}
	s, err = Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	read := readChars(t) - before
	if read > 16*size+4<<20 { // 3 times measured; before issue 28, 2,000 times
		t.Fatalf("opening a %d-byte log torn inside an object of frame heads read %d bytes (%.0f times the log)", size, read, float64(read)/float64(size))
	}
	t.Logf("opening a %d-byte log read %d bytes", size, read)
	if it, err := s.GetObject(kk); err != nil || it.Header.ResourceVersion != "5" {
		t.Fatalf("kubelet's Secret after the torn tail: %v", err)
	}
	if _, err := s.GetObject(tenant); err == nil {
		t.Fatal("the torn record was read")
	}
}

// refResync is the resync as it was before issue 28 (every frame head's announced length read and
// checksummed), over the file's bytes: what the bounded one must find.
func refResync(file []byte, seed uint32, from int64) (int64, bool) {
	size := int64(len(file))
	validAt := func(at int64) (int64, bool) {
		if at+frameLen > size {
			return 0, false
		}
		n, ok := checkFrame(file[at:])
		if !ok || at+frameLen+int64(n) > size {
			return 0, false
		}
		return at + frameLen + int64(n), recordSum(seed, file[at+frameLen:at+frameLen+int64(n)]) == binary.BigEndian.Uint32(file[at+8:])
	}
	skipped := false
	for at := from; at < size; {
		j := bytes.Index(file[at:], []byte(frameMagic))
		if j < 0 {
			break
		}
		at += int64(j)
		end := at
		for e, ok := validAt(end); ok; e, ok = validAt(end) {
			end = e
		}
		switch {
		case end == size:
			return at, skipped
		case end > at:
			skipped, at = true, end
		default:
			at++
		}
	}
	return -1, skipped
}

// randomLog is a log's bytes after its header: records of the log (some long, across the resync's
// blocks), some corrupted, random bytes, objects full of frame heads, and records hidden inside
// records (as a tenant who knew the salt would write: the resync must not land inside a chain).
func randomLog(rng *rand.Rand, seed uint32) []byte {
	var b []byte
	record := func(n int) []byte {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
		return frame(p, seed)
	}
	for len(b) < 300<<10 {
		switch rng.IntN(8) {
		case 0, 1, 2:
			b = append(b, record(rng.IntN(2000))...)
		case 3:
			b = append(b, record(40<<10+rng.IntN(60<<10))...)
		case 4:
			r := record(100 + rng.IntN(2000))
			r[rng.IntN(len(r))] ^= byte(1 + rng.IntN(255))
			b = append(b, r...)
		case 5:
			b = append(b, plantHeads(rng, 1000+rng.IntN(20000), 8+rng.IntN(30), 3000)...)
		case 6:
			inner := append(record(rng.IntN(500)), record(rng.IntN(500))...)
			b = append(b, frame(append(inner, record(50 + rng.IntN(200))[:50]...), seed)...)
		case 7:
			b = append(b, record(rng.IntN(300))[:rng.IntN(40)]...)
		}
	}
	return b
}

// The bounded resync lands where the one before issue 28 did, from anywhere in logs of every kind
// of damage, salted and not (version 1), in batches of any size: no record it took is lost, and
// none it refused is taken.
func TestResyncLandsWhereTheUnboundedOneDid(t *testing.T) {
	for round := 0; round < 10; round++ {
		rng := rand.New(rand.NewPCG(uint64(round), 28))
		seed := rng.Uint32() | 1
		if round%3 == 0 {
			seed = 0
		}
		file := append(make([]byte, logHeaderLen), randomLog(rng, seed)...)
		if round%2 == 0 { // a torn tail
			file = file[:len(file)-rng.IntN(100)]
		} else { // records to the end: a corrupt region before them
			for i := 0; i < 20; i++ {
				file = append(file, frame(make([]byte, rng.IntN(3000)), seed)...)
			}
		}
		path := filepath.Join(t.TempDir(), "log")
		if err := os.WriteFile(path, file, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		l := &logFile{seg: &segment{f: f, seed: seed, hdr: logHeaderLen}}
		size := int64(len(file))
		for _, batch := range []int{1, 7, 1000, resyncBatch} {
			from := int64(logHeaderLen + rng.IntN(4000))
			rz := l.newResyncer(from, size, batch)
			if batch == resyncBatch && rz.read > 3*size+resyncBlock { // the heads of one batch
				t.Fatalf("round %d batch %d: read %d bytes of a %d-byte log", round, batch, rz.read, size)
			}
			for ; from < size; from += 1 + int64(rng.IntN(3000)) {
				at, skipped := rz.resync(from)
				wat, wskipped := refResync(file, seed, from)
				if at != wat || skipped != wskipped {
					t.Fatalf("round %d batch %d: a resync from %d lands at %d (skipped %v), before at %d (skipped %v)", round, batch, from, at, skipped, wat, wskipped)
				}
			}
		}
		f.Close()
	}
}

// A bit flipped inside a tenant's object of frame heads (each announcing a record that ends in the
// objects after it) in the middle of a log: at the next start every other object, before the
// damage and after it, reads back; only the damaged one is lost.
func TestCorruptObjectOfFrameHeadsLosesOnlyItself(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	key := func(i int) Key {
		return Key{Resource: Resource{Owner: "app@tenant", Version: "v1", Resource: "secrets"}, Namespace: "tenant", Name: fmt.Sprintf("s-%02d", i)}
	}
	var bodies [][]byte
	for i := 0; i < 30; i++ {
		body := plantHeads(rng, 40<<10, 24, (29-i)*(40<<10))
		bodies = append(bodies, body)
		if err := s.Put(key(i), &Header{ContentType: wire.MediaProtobuf, Namespace: "tenant", Name: key(i).Name, ResourceVersion: fmt.Sprint(i + 1)}, body); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	path := filepath.Join(dir, logDir, "secrets.v1.core.log")
	file, _ := os.ReadFile(path)
	at := bytes.Index(file, bodies[10])
	if at < 0 {
		t.Fatal("the objects were not stored raw: the test proves nothing")
	}
	file[at+len(bodies[10])/2] ^= 0x40
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, body := range bodies {
		it, err := s.GetObject(key(i))
		switch {
		case i == 10 && err == nil:
			t.Fatal("the damaged object was read")
		case i != 10 && (err != nil || !bytes.Equal(it.Body, body)):
			t.Fatalf("object %d after a corrupt region before it or after it: %v", i, err)
		}
	}
}

// FuzzResync: on any bytes after a log's header, salted or not, in batches of any size, the
// bounded resync lands where the unbounded one did, from every offset.
func FuzzResync(f *testing.F) {
	rec := func(p string, seed uint32) []byte { return frame([]byte(p), seed) }
	f.Add(append(append(rec("a", 5), rec("bc", 5)...), rec("def", 5)...), uint32(5), uint8(1))
	f.Add(append(append([]byte("xx\xf1NHR\x00\x00\x00\x02zzzzab"), rec("q", 0)...), rec("", 0)...), uint32(0), uint8(2))
	f.Add(append(rec(string(rec("inner", 9)), 9)[:20], rec("tail", 9)...), uint32(9), uint8(3))
	f.Fuzz(func(t *testing.T, body []byte, seed uint32, batch uint8) {
		file := append(make([]byte, logHeaderLen), body...)
		path := filepath.Join(t.TempDir(), "log")
		if err := os.WriteFile(path, file, 0o600); err != nil {
			t.Fatal(err)
		}
		fh, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		l := &logFile{seg: &segment{f: fh, seed: seed, hdr: logHeaderLen}}
		size := int64(len(file))
		rz := l.newResyncer(logHeaderLen, size, 1+int(batch%16))
		for from := int64(logHeaderLen); from <= size; from++ {
			at, skipped := rz.resync(from)
			if wat, wskipped := refResync(file, seed, from); at != wat || skipped != wskipped {
				t.Fatalf("from %d: lands at %d (skipped %v), the unbounded resync at %d (skipped %v)", from, at, skipped, wat, wskipped)
			}
		}
	})
}
