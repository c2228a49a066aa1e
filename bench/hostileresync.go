package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"nodehub/cache"
)

// benchHostileResync measures the worst start after a torn write (issue 28): cache.Open of a
// cache whose log holds tenants' objects (Secrets in protobuf, stored raw: they do not compress)
// of frame heads, one every 20 bytes (denser ones compress), each announcing a record that fits
// in the rest of the file; the first object's last 100 bytes lost (zeroed, as a torn write
// leaves them) and the rest of the file kept, so the resync covers every head. One object of 1, 3 and 10 MiB, then 100 objects of 1 MiB (100 MiB of log).
// The unbounded resync read what every head announced: 18.6 s for 1 MiB, 2 min 38 s for 3 MiB.
func benchHostileResync() {
	fmt.Printf("\n## hostile bytes: start after a torn write inside objects of frame heads (cache.Open)\n")
	fmt.Println("log\tobjects\tOpen\tCPU")
	for _, w := range []struct{ objects, size int }{{1, 1 << 20}, {1, 3 << 20}, {1, 10 << 20}, {100, 1 << 20}} {
		d, c, logBytes, err := resyncOpen(w.objects, w.size)
		if err != nil {
			fmt.Printf("error: %v\n", err)
			return
		}
		fmt.Printf("%.0f MiB\t%d × %d MiB\t%v\t%v\n", float64(logBytes)/(1<<20), w.objects, w.size>>20, d.Round(time.Millisecond), c.Round(time.Millisecond))
	}
}

// resyncOpen writes the objects into a new cache, tears its log and times its Open: the time it
// took and the CPU time the process used meanwhile.
func resyncOpen(objects, size int) (wall, cpu time.Duration, logBytes int64, err error) {
	dir, err := os.MkdirTemp("", "nodehub-resync-")
	if err != nil {
		return 0, 0, 0, err
	}
	defer os.RemoveAll(dir)
	s, err := cache.Open(dir, nil)
	if err != nil {
		return 0, 0, 0, err
	}
	rng := rand.New(rand.NewPCG(28, 3))
	var first []byte
	for i := 0; i < objects; i++ {
		body := frameHeads(rng, size, (objects-i)*size)
		if i == 0 {
			first = body
		}
		name := fmt.Sprintf("heads-%03d", i)
		k := cache.Key{Resource: cache.Resource{Owner: "app@tenant", Version: "v1", Resource: "secrets"}, Namespace: "tenant", Name: name}
		if err := s.Put(k, &cache.Header{ContentType: "application/vnd.kubernetes.protobuf", Namespace: "tenant", Name: name, ResourceVersion: fmt.Sprint(i + 1)}, body); err != nil {
			return 0, 0, 0, err
		}
	}
	s.Close()
	path := filepath.Join(dir, ".logs", "secrets.v1.core.log")
	file, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, 0, err
	}
	at := bytes.Index(file, first[:4096])
	if at < 0 {
		return 0, 0, 0, fmt.Errorf("the objects were not stored raw")
	}
	// The tear: the first object's last 100 bytes were lost, and a stale rest of the file remains
	// (as a file system that does not order a file's writes leaves it).
	copy(file[at+size-100:], bytes.Repeat([]byte{0}, 100))
	if err := os.WriteFile(path, file, 0o600); err != nil {
		return 0, 0, 0, err
	}
	logBytes = int64(len(file))
	file = nil
	runtime.GC() // the garbage of the writes is not the start's
	t0, c0 := time.Now(), selfCPU()
	s, err = cache.Open(dir, nil)
	d, c := time.Since(t0), selfCPU()-c0
	if err != nil {
		return 0, 0, 0, err
	}
	s.Close()
	return d, c, logBytes, nil
}

// frameHeads is n random bytes with a frame head ("\xf1NHR", a length, a checksum) every 20
// bytes, each announcing a random length up to what follows it in rest.
func frameHeads(rng *rand.Rand, n, rest int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	for i := 0; i+12 <= n; i += 20 {
		copy(b[i:], "\xf1NHR")
		binary.BigEndian.PutUint32(b[i+4:], uint32(rng.IntN(rest-i-12+1)))
	}
	return b
}

// selfCPU is the user and system time the process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
