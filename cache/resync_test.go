package cache

import (
	"bufio"
	"bytes"
	"encoding/binary"
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
	if read > 8*size+1<<20 {
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
