package tokens

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func jwt(exp time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(fmt.Sprintf(`{"sub":"system:serviceaccount:ns:sa","exp":%d}`, exp.Unix()))) + ".sig"
}

func key(id, pod string) Key {
	return Key{Identity: id, Namespace: "ns", ServiceAccount: "sa", Audiences: []string{"api"}, ExpirationSeconds: 3607,
		BoundKind: "Pod", BoundName: pod, BoundUID: "uid-" + pod}
}

func TestStoreKeepsPerCallerAndSurvivesReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tokens")
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	e := Entry{Token: jwt(now.Add(time.Hour)), Expiration: now.Add(time.Hour), ValidUntil: now.Add(time.Hour)}
	s.Put(key("node", "p1"), e)
	if got, ok := s.Get(key("node", "p1")); !ok || got.Token != e.Token {
		t.Fatalf("get: %v %v", got, ok)
	}
	if _, ok := s.Get(key("cred:other", "p1")); ok {
		t.Fatal("a token served to another caller")
	}
	if _, ok := s.Get(key("node", "p2")); ok {
		t.Fatal("a token served for another pod")
	}
	if err := s.Save(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v %v", fi.Mode(), err)
	}
	des, _ := os.ReadDir(dir)
	if len(des) != 1 {
		t.Fatalf("%d files, want 1", len(des))
	}
	if fi, _ := des[0].Info(); fi.Mode().Perm() != 0o600 {
		t.Fatalf("file mode %v", fi.Mode())
	}
	// A leftover temporary file of an interrupted save is removed, the entry read back.
	os.WriteFile(filepath.Join(dir, ".x.tmp"), []byte("torn"), 0o600)
	s2, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := s2.Get(key("node", "p1")); !ok || got.Token != e.Token || !got.ValidUntil.Equal(e.ValidUntil.Truncate(0)) && got.ValidUntil.Unix() != e.ValidUntil.Unix() {
		t.Fatalf("after reopen: %+v %v", got, ok)
	}
	if _, err := os.Stat(filepath.Join(dir, ".x.tmp")); !os.IsNotExist(err) {
		t.Fatal("temporary file left")
	}
}

func TestStoreExpiryDeletes(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	clock := now
	s, _ := Open(dir, Options{Now: func() time.Time { return clock }})
	s.Put(key("node", "p1"), Entry{Token: "t", ValidUntil: now.Add(time.Minute)})
	s.Put(key("node", "gone"), Entry{Token: "t", ValidUntil: now.Add(-time.Second)}) // already expired: not kept
	if s.Len() != 1 {
		t.Fatalf("len %d", s.Len())
	}
	if err := s.Save(); err != nil {
		t.Fatal(err)
	}
	clock = now.Add(2 * time.Minute)
	if _, ok := s.Get(key("node", "p1")); ok {
		t.Fatal("expired token served")
	}
	if err := s.Save(); err != nil {
		t.Fatal(err)
	}
	if des, _ := os.ReadDir(dir); len(des) != 0 {
		t.Fatalf("expired token's file kept: %d files", len(des))
	}
	// Expired on disk at start: dropped and deleted.
	s.Put(key("node", "p3"), Entry{Token: "t", ValidUntil: clock.Add(time.Minute)})
	s.Save()
	later := clock.Add(time.Hour)
	s3, _ := Open(dir, Options{Now: func() time.Time { return later }})
	if s3.Len() != 0 {
		t.Fatal("expired token loaded")
	}
	if des, _ := os.ReadDir(dir); len(des) != 0 {
		t.Fatal("expired file not deleted at start")
	}
}

func TestStoreBounded(t *testing.T) {
	now := time.Now()
	s, _ := Open("", Options{MaxEntries: 3, MaxBytes: 1 << 20})
	for i := 0; i < 10; i++ {
		s.Put(key("node", fmt.Sprint(i)), Entry{Token: "t", ValidUntil: now.Add(time.Duration(i+1) * time.Minute)})
	}
	if s.Len() != 3 {
		t.Fatalf("len %d, want 3", s.Len())
	}
	if _, ok := s.Get(key("node", "9")); !ok {
		t.Fatal("the longest-lived entry was evicted")
	}
	b, _ := Open("", Options{MaxBytes: 2000})
	for i := 0; i < 10; i++ {
		b.Put(key("node", fmt.Sprint(i)), Entry{Token: strings.Repeat("x", 500), ValidUntil: now.Add(time.Hour)})
	}
	if b.bytes > 2000 || b.Len() == 0 {
		t.Fatalf("bytes %d, entries %d", b.bytes, b.Len())
	}
	b.Put(key("node", "huge"), Entry{Token: strings.Repeat("x", maxEntryBytes), ValidUntil: now.Add(time.Hour)})
	if _, ok := b.Get(key("node", "huge")); ok {
		t.Fatal("an entry beyond maxEntryBytes kept")
	}
}

func TestRunSavesInOneBatch(t *testing.T) {
	dir := t.TempDir()
	s, _ := Open(dir, Options{SaveDelay: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	defer func() { cancel(); <-done }()
	go func() { defer close(done); s.Run(ctx) }()
	now := time.Now()
	for i := 0; i < 5; i++ {
		s.Put(key("node", fmt.Sprint(i)), Entry{Token: "t", ValidUntil: now.Add(time.Hour)})
	}
	// Nothing is written before the batch delay, which a loaded machine may have outlasted by the
	// time the directory is read: then the check says nothing.
	if des, _ := os.ReadDir(dir); len(des) != 0 && time.Since(now) < 50*time.Millisecond {
		t.Fatal("written before the batch delay")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		des, _ := os.ReadDir(dir)
		if len(des) == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d files after the batch delay", len(des))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRequestRoundTrip(t *testing.T) {
	exp := int64(3607)
	req := &TokenRequest{Spec: TokenRequestSpec{ExpirationSeconds: &exp,
		BoundObjectRef: &BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "p", UID: "u"}}}
	for _, pb := range []bool{false, true} {
		b, err := Encode(req, pb)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if KeyOf("node", "ns", "sa", got).name() != KeyOf("node", "ns", "sa", req).name() {
			t.Fatalf("protobuf=%v: key differs after a round trip", pb)
		}
	}
	valid := time.Now().Add(365 * 24 * time.Hour).Truncate(time.Second)
	answer := req.DeepCopy()
	answer.Spec.Audiences = []string{"https://kubernetes.default.svc"}
	answer.Status = TokenRequestStatus{Token: jwt(valid), ExpirationTimestamp: metav1.NewTime(time.Now().Add(time.Hour))}
	e, err := EntryOf(answer)
	if err != nil || !e.ValidUntil.Equal(valid) {
		t.Fatalf("entry %+v %v: validity should be the JWT's exp", e, err)
	}
	out := Answer(req, "ns", "sa", e, time.Now())
	if out.Status.Token != e.Token || len(out.Spec.Audiences) != 1 || out.Name != "sa" {
		t.Fatalf("answer %+v", out)
	}
	if _, err := Decode([]byte(`{"kind":"Pod"}`)); err == nil {
		t.Fatal("a Pod decoded as a TokenRequest")
	}
	si := StandIn(req, "ns", "sa", time.Now())
	if si.Status.Token == "" || si.Status.ExpirationTimestamp.Time.After(time.Now().Add(StandInLife+time.Second)) {
		t.Fatalf("stand-in %+v", si.Status)
	}
}

func TestRefreshOfALongLivedTokenWaitsForACleanStop(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	clock := now
	s, _ := Open(dir, Options{Now: func() time.Time { return clock }})
	year := Entry{Token: "first", ValidUntil: now.Add(365 * 24 * time.Hour)}
	s.Put(key("node", "p"), year)
	s.Save()
	refreshed := year
	refreshed.Token, refreshed.ValidUntil = "second", year.ValidUntil.Add(time.Hour)
	s.Put(key("node", "p"), refreshed)
	if got, _ := s.Get(key("node", "p")); got.Token != "second" {
		t.Fatalf("served %q, want the newest token", got.Token)
	}
	s.Save()
	if r, _ := Open(dir, Options{Now: func() time.Time { return clock }}); r.m[key("node", "p").name()].Entry.Token != "first" {
		t.Fatal("a refresh of a year-long token was written before a clean stop")
	}
	s.SaveAll()
	if r, _ := Open(dir, Options{Now: func() time.Time { return clock }}); r.m[key("node", "p").name()].Entry.Token != "second" {
		t.Fatal("a clean stop did not write the newest token")
	}
	// A short-lived token (not extended): every refresh is written at the next batch.
	hour := Entry{Token: "h1", ValidUntil: now.Add(time.Hour)}
	s.Put(key("node", "q"), hour)
	s.Save()
	hour.Token, hour.ValidUntil = "h2", now.Add(2*time.Hour)
	s.Put(key("node", "q"), hour)
	s.Save()
	if r, _ := Open(dir, Options{Now: func() time.Time { return clock }}); r.m[key("node", "q").name()].Entry.Token != "h2" {
		t.Fatal("a refresh of an hour-long token waited")
	}
	// A waiting refresh is written once the copy on disk nears its end.
	s.Put(key("node", "p"), Entry{Token: "third", ValidUntil: refreshed.ValidUntil.Add(time.Hour)})
	clock = refreshed.ValidUntil.Add(-time.Hour)
	s.mu.Lock()
	s.pruneLocked()
	s.mu.Unlock()
	s.Save()
	if r, _ := Open(dir, Options{Now: func() time.Time { return clock }}); r.m[key("node", "p").name()].Entry.Token != "third" {
		t.Fatal("a waiting refresh was not written as the disk copy neared its end")
	}
}

func TestOtherCallersCannotPushKubeletsTokensOut(t *testing.T) {
	now := time.Now()
	s, _ := Open("", Options{MaxEntries: 8, MaxBytes: 1 << 20})
	for i := 0; i < 4; i++ {
		s.Put(key(NodeIdentity, fmt.Sprint(i)), Entry{Token: "t", ValidUntil: now.Add(time.Hour)})
	}
	for i := 0; i < 50; i++ { // a pod asking for many long-lived tokens
		s.Put(key("cred:pod", fmt.Sprint(i)), Entry{Token: "t", ValidUntil: now.Add(365 * 24 * time.Hour)})
	}
	for i := 0; i < 4; i++ {
		if _, ok := s.Get(key(NodeIdentity, fmt.Sprint(i))); !ok {
			t.Fatalf("kubelet's token %d pushed out", i)
		}
	}
	if s.Len() > 8 || s.Len() < 5 {
		t.Fatalf("len %d", s.Len())
	}
}

func TestCaller(t *testing.T) {
	if Caller(true, "Bearer x") != NodeIdentity || Caller(false, "") != "" {
		t.Fatal("node or anonymous caller")
	}
	a, b := Caller(false, "Bearer a"), Caller(false, "Bearer b")
	if a == b || a == "" || a == NodeIdentity {
		t.Fatalf("credentials not told apart: %q %q", a, b)
	}
}
