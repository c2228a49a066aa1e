package cache

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"nodehub/wire"
)

func openStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func pod(name, node, rv string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", ResourceVersion: rv, Labels: labels, UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{NodeName: node}}
}

func podJSON(t *testing.T, p *corev1.Pod) []byte {
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// listBody is a JSON PodList as the apiserver writes it: items without kind/apiVersion.
func listBody(t *testing.T, rv string, pods ...*corev1.Pod) []byte {
	l := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, ListMeta: metav1.ListMeta{ResourceVersion: rv}}
	for _, p := range pods {
		c := *p
		c.TypeMeta = metav1.TypeMeta{}
		l.Items = append(l.Items, c)
	}
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// reopen closes s and opens its directory again, as a restarted hub does; the store returned is
// closed when the test ends.
func reopen(t *testing.T, s *Store) *Store {
	t.Helper()
	dir := s.Path()
	s.Close()
	s2, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	return s2
}

func newManager(s *Store) *Manager {
	return &Manager{Policy: Policy{Agents: strings.Split(DefaultAgents, ",")}, Store: s, Writer: NewWriter(s, 0, nil)}
}

// respond tees body through the manager as the response to method+url from component, reading it
// in small pieces as a client would, and waits for the writer.
func respond(t *testing.T, m *Manager, method, url, component string, body []byte) {
	t.Helper()
	r, _ := http.NewRequest(method, "http://hub"+url, nil)
	r.Header.Set("User-Agent", component+"/v1")
	ri, err := wire.ParseRequest(r)
	if err != nil {
		t.Fatal(err)
	}
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {wire.MediaJSON}}, Body: io.NopCloser(bytes.NewReader(body))}
	tb := m.Tee(ri, component, resp)
	if tb == nil {
		t.Fatalf("%s %s not cached", method, url)
	}
	buf := make([]byte, 7)
	for {
		if _, err := tb.Read(buf); err != nil {
			break
		}
	}
	tb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Writer.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func names(t *testing.T, s *Store, owner, ns, ls, fs string) ([]string, ListResult) {
	t.Helper()
	sel, err := wire.NewSelector(ns, ls, fs)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	res, err := s.EachInList(Resource{Owner: owner, Version: "v1", Resource: "pods"}, sel, func(it Item) error {
		out = append(out, it.Header.Name)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out, res
}

func TestListsWithDifferentSelectorsAndReconcile(t *testing.T) {
	s := openStore(t)
	m := newManager(s)
	a := pod("a", "edge-1", "10", map[string]string{"app": "x"})
	b := pod("b", "edge-1", "11", map[string]string{"app": "y"})
	c := pod("c", "edge-2", "12", map[string]string{"app": "x"})
	respond(t, m, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1", "kubelet", listBody(t, "100", a, b))
	respond(t, m, "GET", "/api/v1/namespaces/default/pods?labelSelector=app%3Dx", "kubelet", listBody(t, "101", a, c))

	if got, res := names(t, s, "kubelet", "", "", "spec.nodeName=edge-1"); strings.Join(got, ",") != "a,b" || res.Record == nil || res.Record.ResourceVersion != "100" {
		t.Fatalf("node list reads back %v %+v", got, res.Record)
	}
	if got, res := names(t, s, "kubelet", "default", "app=x", ""); strings.Join(got, ",") != "a,c" || res.Record.ResourceVersion != "101" {
		t.Fatalf("label list reads back %v", got)
	}
	// The file is the object as a GET returns it: kind and apiVersion first.
	it, err := s.GetObject(Key{Resource: Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}, Namespace: "default", Name: "a"})
	if err != nil || !bytes.Equal(it.Body, podJSON(t, a)) {
		t.Fatalf("stored a: %v\n%s\n%s", err, it.Body, podJSON(t, a))
	}

	// Re-list of the node list without a: a stays (the label list still holds it), b is updated.
	files0 := s.Stats().FilesWritten
	b2 := pod("b", "edge-1", "20", map[string]string{"app": "y"})
	respond(t, m, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1", "kubelet", listBody(t, "200", b2))
	if got, _ := names(t, s, "kubelet", "", "", "spec.nodeName=edge-1"); strings.Join(got, ",") != "a,b" {
		t.Fatalf("a deleted though another list holds it: %v", got)
	}
	if n := s.Stats().FilesWritten - files0; n != 2 { // b and the list record
		t.Fatalf("re-list wrote %d files, want 2 (b's new version and the record)", n)
	}
	// Re-list of the label list without a: now nobody holds a, so it goes.
	respond(t, m, "GET", "/api/v1/namespaces/default/pods?labelSelector=app%3Dx", "kubelet", listBody(t, "201", c))
	if got, _ := names(t, s, "kubelet", "default", "", ""); strings.Join(got, ",") != "b,c" {
		t.Fatalf("after both re-lists: %v", got)
	}
	// The same list again at the same resourceVersion: nothing changed, nothing is written.
	files1 := s.Stats().FilesWritten
	respond(t, m, "GET", "/api/v1/namespaces/default/pods?labelSelector=app%3Dx", "kubelet", listBody(t, "201", c))
	if n := s.Stats().FilesWritten - files1; n != 0 {
		t.Fatalf("unchanged re-list wrote %d files, want none", n)
	}
	// At a newer resourceVersion with the same objects: only the record is written.
	respond(t, m, "GET", "/api/v1/namespaces/default/pods?labelSelector=app%3Dx", "kubelet", listBody(t, "202", c))
	if n := s.Stats().FilesWritten - files1; n != 1 {
		t.Fatalf("re-list with unchanged objects wrote %d files, want only the record", n)
	}
	// Another component's cache is separate.
	if got, res := names(t, s, "kube-proxy", "", "", ""); len(got) != 0 || res.Record != nil {
		t.Fatalf("kube-proxy sees kubelet's cache: %v", got)
	}
}

func TestWatchEventsApplyAndCoalesce(t *testing.T) {
	s := openStore(t)
	m := newManager(s)
	// Write-behind, as the hub runs it (--cache-sync-interval): the versions of one object that
	// arrive within the delay cost one write, however the writer is scheduled.
	m.Writer.Delay = 300 * time.Millisecond
	var stream []byte
	for i, rv := range []string{"5", "6", "7"} {
		p := pod("w", "edge-1", rv, map[string]string{"v": fmt.Sprint(i)})
		typ := wire.EventModified
		if i == 0 {
			typ = wire.EventAdded
		}
		stream = append(stream, wire.EncodeJSONWatchEvent(wire.WatchEvent{Type: typ, Object: podJSON(t, p)})...)
	}
	gone := pod("gone", "edge-1", "8", nil)
	stream = append(stream, wire.EncodeJSONWatchEvent(wire.WatchEvent{Type: wire.EventAdded, Object: podJSON(t, gone)})...)
	stream = append(stream, wire.EncodeJSONWatchEvent(wire.WatchEvent{Type: wire.EventDeleted, Object: podJSON(t, gone)})...)
	stream = append(stream, wire.EncodeJSONWatchEvent(wire.WatchEvent{Type: wire.EventBookmark, Object: []byte(`{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"9"}}`)})...)
	respond(t, m, "GET", "/api/v1/pods", "kubelet", listBody(t, "4"))
	respond(t, m, "GET", "/api/v1/pods?watch=true", "kubelet", stream)
	got, res := names(t, s, "kubelet", "", "", "")
	if res.Record == nil || res.Record.ResourceVersion != "9" {
		t.Fatalf("the bookmark's resourceVersion was not recorded: %+v", res.Record)
	}
	if strings.Join(got, ",") != "w" {
		t.Fatalf("after the watch: %v", got)
	}
	it, _ := s.GetObject(Key{Resource: Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}, Namespace: "default", Name: "w"})
	if it.Header.ResourceVersion != "7" {
		t.Fatalf("w at rv %s", it.Header.ResourceVersion)
	}
	// The three versions of w arrived in one batch: one file write, not three (plus the list
	// record, written by the list and again for the bookmark).
	if n := s.Stats().FilesWritten; n != 3 {
		t.Fatalf("%d files written for a coalesced batch", n)
	}
	// An older version never replaces a newer one.
	respond(t, m, "GET", "/api/v1/namespaces/default/pods/w", "kubelet", podJSON(t, pod("w", "edge-1", "6", nil)))
	it, _ = s.GetObject(Key{Resource: Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}, Namespace: "default", Name: "w"})
	if it.Header.ResourceVersion != "7" {
		t.Fatalf("older GET replaced newer: rv %s", it.Header.ResourceVersion)
	}
}

func TestPolicy(t *testing.T) {
	p := Policy{Agents: strings.Split(DefaultAgents, ","), Excluded: []string{"calico-node"}}
	for url, want := range map[string]bool{
		"kubelet GET /api/v1/pods":                                             true,
		"kubelet GET /api/v1/namespaces/a/secrets/s":                           true,
		"kube-proxy GET /api/v1/namespaces/a/secrets/s":                        false,
		"kubelet GET /api/v1/namespaces/a/pods/p/log":                          false,
		"kubelet PATCH /api/v1/nodes/n/status":                                 true,
		"kubelet POST /api/v1/namespaces/a/serviceaccounts/s/token":            false,
		"kubelet POST /apis/certificates.k8s.io/v1/certificatesigningrequests": false,
		"kubelet DELETE /api/v1/namespaces/a/pods/p":                           false,
		"kubelet GET /api/v1/namespaces/a/pods/p/proxy/x":                      false,
		"calico-node GET /api/v1/pods":                                         false,
		"kubectl GET /api/v1/pods":                                             false,
		"kubelet GET /version":                                                 false,
	} {
		f := strings.Fields(url)
		r, _ := http.NewRequest(f[1], "http://hub"+f[2], nil)
		r.Header.Set("User-Agent", f[0]+"/v1")
		ri, _ := wire.ParseRequest(r)
		if _, got := p.Caches(ri); got != want {
			t.Errorf("%s: cached=%v want %v", url, got, want)
		}
	}
	if _, ok := (Policy{Agents: []string{"*"}, Excluded: []string{"calico-node"}}).Caches(&wire.RequestInfo{IsResource: true, Verb: "list", Resource: "ipamblocks", Component: "calico-node"}); ok {
		t.Error("exclusion must win over *")
	}
	// The hub's own data (topology, the pool's shared stores) is cached whatever --cache-agents says.
	if _, ok := (Policy{Agents: []string{"kubelet"}}).Caches(&wire.RequestInfo{IsResource: true, Verb: "watch", Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices", Component: SelfComponent}); !ok {
		t.Error("the hub's own component must be cached with a custom --cache-agents")
	}
}

func TestCorruptRecordIsNeverServedAndListsBecomeIncomplete(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := newManager(s)
	respond(t, m, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1", "kubelet",
		listBody(t, "10", pod("p", "edge-1", "1", nil), pod("q", "edge-1", "2", nil)))
	k := Key{Resource: Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}, Namespace: "default", Name: "p"}
	if _, res := names(t, s, "kubelet", "", "", "spec.nodeName=edge-1"); res.Partial || res.Count != 2 {
		t.Fatalf("fresh list: %+v", res)
	}
	// Rot one byte of p's record in the middle of the log.
	path := filepath.Join(dir, logDir, "pods.v1.core.log")
	data, _ := os.ReadFile(path)
	i := bytes.Index(data, []byte(`"name":"p"`))
	if i < 0 {
		t.Fatal("record not found")
	}
	data[i+9] ^= 0xff
	os.WriteFile(path, data, 0o600)
	if _, _, err := s.Get(k); err == nil || !errors.Is(err, ErrNotFound) {
		t.Fatalf("corrupt record served: %v", err)
	}
	got, res := names(t, s, "kubelet", "", "", "spec.nodeName=edge-1")
	if !res.Partial || strings.Join(got, ",") != "q" {
		t.Fatalf("a list missing a corrupt object is not flagged partial: %v %+v", got, res)
	}
	s.Close()

	// At start the bad region is skipped, kept in quarantine, and the list stays incomplete.
	s, err = Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, _, err := s.Get(k); err == nil {
		t.Fatal("corrupt record served after a restart")
	}
	got, res = names(t, s, "kubelet", "", "", "spec.nodeName=edge-1")
	if !res.Partial || strings.Join(got, ",") != "q" {
		t.Fatalf("after a restart: %v %+v", got, res)
	}
	if q, _ := os.ReadDir(filepath.Join(dir, quarantineDir)); len(q) != 1 {
		t.Fatalf("%d files in quarantine", len(q))
	}
	if _, c := s.Verify(context.Background()); c == 0 {
		t.Fatal("Verify does not report the corruption")
	}
}

func TestYurtHubCacheFileIsRead(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "kubelet", "pods.v1.core", "default")
	os.MkdirAll(dir, 0o700)
	os.WriteFile(filepath.Join(dir, "old"), podJSON(t, pod("old", "edge-1", "3", map[string]string{"a": "b"})), 0o600)
	s, err := Open(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, _ := names(t, s, "kubelet", "", "a=b", "spec.nodeName=edge-1")
	if strings.Join(got, ",") != "old" {
		t.Fatalf("YurtHub file not read: %v", got)
	}
	if _, err := os.Stat(filepath.Join(root, "kubelet")); !os.IsNotExist(err) {
		t.Fatal("the old layout was not removed once in the logs")
	}
}

func TestKeysNeverEscapeTheCache(t *testing.T) {
	s := openStore(t)
	for _, k := range []Key{
		{Resource: Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}, Namespace: "..", Name: "x"},
		{Resource: Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}, Name: "a/b"},
		{Resource: Resource{Owner: "kubelet", Version: "v1", Resource: "../pods"}, Name: "x"},
		{Resource: Resource{Owner: "", Version: "v1", Resource: "pods"}, Name: "x"},
	} {
		if err := s.Put(k, &Header{}, []byte("{}")); err == nil {
			t.Errorf("put %+v succeeded", k)
		}
	}
	odd := Key{Resource: Resource{Owner: "../evil", Version: "v1", Resource: "pods"}, Name: ".hidden%1"}
	if err := s.Put(odd, &Header{Name: odd.Name}, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	var found []string
	s.Keys(odd.Resource, "", func(k Key) error { found = append(found, k.Name); return nil })
	if len(found) != 1 || found[0] != ".hidden%1" {
		t.Fatalf("odd names do not round-trip: %v", found)
	}
}

func TestSecondProcessCannotOpen(t *testing.T) {
	s := openStore(t)
	if _, err := Open(s.Path(), nil); err == nil {
		t.Fatal("second open of a locked cache succeeded")
	}
}

func TestFullQueueKeepsClientStreamingAndMarksIncomplete(t *testing.T) {
	s := openStore(t)
	release := make(chan struct{})
	s.hook = func(string) error { <-release; return nil } // a disk that hangs
	m := &Manager{Policy: Policy{Agents: []string{"*"}}, Store: s, Writer: NewWriter(s, 64<<10, nil)}
	var stream []byte
	for i := 0; i < 2000; i++ {
		stream = append(stream, wire.EncodeJSONWatchEvent(wire.WatchEvent{Type: wire.EventAdded, Object: podJSON(t, pod(fmt.Sprint("p", i), "edge-1", fmt.Sprint(i+1), nil))})...)
	}
	r, _ := http.NewRequest("GET", "http://hub/api/v1/pods?watch=true", nil)
	r.Header.Set("User-Agent", "kubelet/1")
	ri, _ := wire.ParseRequest(r)
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {wire.MediaJSON}}, Body: io.NopCloser(bytes.NewReader(stream))}
	var dropped int
	m.Writer.OnDrop = func(Resource) { dropped++ }
	tb := m.Tee(ri, "kubelet", resp)
	start := time.Now()
	got, err := io.ReadAll(tb)
	if err != nil || !bytes.Equal(got, stream) {
		t.Fatalf("client stream changed: %v", err)
	}
	// The disk hangs until the test releases it: a tee that waited for it would not be here. The
	// bound catches one that waits a while for room before dropping (on two loaded cores reading
	// 2000 events takes well under it).
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("client waited %v on a hung disk", d)
	}
	if dropped == 0 || m.Writer.Queued() > 64<<10 {
		t.Fatalf("queue not bounded: dropped %d queued %d", dropped, m.Writer.Queued())
	}
	close(release)
	tb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m.Writer.Flush(ctx)
}

func TestENOSPCIsReportedAndNothingCorrupted(t *testing.T) {
	s := openStore(t)
	m := newManager(s)
	var errs int
	m.Writer.OnError = func(Resource, error) { errs++ }
	a := pod("a", "edge-1", "1", nil)
	respond(t, m, "GET", "/api/v1/namespaces/default/pods/a", "kubelet", podJSON(t, a))
	s.hook = func(string) error { return syscall.ENOSPC }
	respond(t, m, "GET", "/api/v1/namespaces/default/pods/a", "kubelet", podJSON(t, pod("a", "edge-1", "2", nil)))
	if errs == 0 {
		t.Fatal("ENOSPC not reported")
	}
	it, err := s.GetObject(Key{Resource: Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}, Namespace: "default", Name: "a"})
	if err != nil || it.Header.ResourceVersion != "1" {
		t.Fatalf("old copy lost or corrupted by a failed write: %v", err)
	}
}

// A watch's events often arrive after its queue went idle and its goroutine ended; the next
// goroutine must still write them.
func TestWatchEventsAfterTheQueueWentIdle(t *testing.T) {
	s := openStore(t)
	m := newManager(s)
	r, _ := http.NewRequest("GET", "http://hub/api/v1/pods?watch=true", nil)
	r.Header.Set("User-Agent", "kubelet/1")
	ri, _ := wire.ParseRequest(r)
	pr, pw := io.Pipe()
	tb := m.Tee(ri, "kubelet", &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {wire.MediaJSON}}, Body: pr})
	go io.Copy(io.Discard, tb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k := Key{Resource: Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}, Namespace: "default", Name: "late"}
	for _, rv := range []string{"1", "2", "3"} {
		pw.Write(wire.EncodeJSONWatchEvent(wire.WatchEvent{Type: wire.EventModified, Object: podJSON(t, pod("late", "edge-1", rv, nil))}))
		// The tee hands the event to the writer after the pipe's read returned: wait until it is
		// written and the queue went idle (its goroutine ended, the queue retired), so the next
		// event finds no goroutine.
		for {
			err := m.Writer.Flush(ctx)
			it, gerr := s.GetObject(k)
			if err == nil && gerr == nil && it.Header.ResourceVersion == rv && m.Writer.Queues() == 0 {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("event rv %s not written after the queue went idle: %v %v %+v, %d queues", rv, err, gerr, it.Header, m.Writer.Queues())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	pw.Close()
}

func TestDelayCoalescesChurnIntoOneWritePerKey(t *testing.T) {
	s := openStore(t)
	m := newManager(s)
	// A delay no loaded machine outlasts: the changes are written when the writer closes, which
	// writes what waits without waiting out the delay.
	m.Writer.Delay = time.Hour
	r, _ := http.NewRequest("GET", "http://hub/api/v1/pods?watch=true", nil)
	r.Header.Set("User-Agent", "kubelet/1")
	ri, _ := wire.ParseRequest(r)
	pr, pw := io.Pipe()
	tb := m.Tee(ri, "kubelet", &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {wire.MediaJSON}}, Body: pr})
	copied := make(chan struct{})
	go func() { io.Copy(io.Discard, tb); close(copied) }()
	for i := 1; i <= 20; i++ { // 20 changes of 2 objects, inside the delay
		name := fmt.Sprint("churn-", i%2)
		pw.Write(wire.EncodeJSONWatchEvent(wire.WatchEvent{Type: wire.EventModified, Object: podJSON(t, pod(name, "edge-1", fmt.Sprint(i), nil))}))
	}
	pw.Close()
	<-copied // the tee handed every event to the writer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for m.Writer.Queued() > 0 { // and the writer took each into its pending writes
		if ctx.Err() != nil {
			t.Fatalf("%d bytes still queued", m.Writer.Queued())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := s.Stats().FilesWritten; n != 0 {
		t.Fatalf("%d files written inside the delay", n)
	}
	if err := m.Writer.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := s.Stats().FilesWritten; n != 2 {
		t.Fatalf("20 changes of 2 keys inside the delay wrote %d files, want 2", n)
	}
	it, _ := s.GetObject(Key{Resource: Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}, Namespace: "default", Name: "churn-0"})
	if it.Header == nil || it.Header.ResourceVersion != "20" {
		t.Fatalf("not the latest version: %+v", it.Header)
	}
}

func TestGzipListIsCached(t *testing.T) {
	s := openStore(t)
	m := newManager(s)
	var pods []*corev1.Pod
	for i := 0; i < 300; i++ {
		pods = append(pods, pod(fmt.Sprintf("z%03d", i), "edge-1", fmt.Sprint(i+1), nil))
	}
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write(listBody(t, "999", pods...))
	zw.Close()
	r, _ := http.NewRequest("GET", "http://hub/api/v1/pods", nil)
	r.Header.Set("User-Agent", "kubelet/1")
	ri, _ := wire.ParseRequest(r)
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {wire.MediaJSON}, "Content-Encoding": {"gzip"}}, Body: io.NopCloser(bytes.NewReader(zb.Bytes()))}
	tb := m.Tee(ri, "kubelet", resp)
	got, _ := io.ReadAll(tb)
	tb.Close()
	if !bytes.Equal(got, zb.Bytes()) {
		t.Fatal("the client did not get the compressed body unchanged")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m.Writer.Flush(ctx)
	names, res := names(t, s, "kubelet", "", "", "")
	if len(names) != 300 || res.Record == nil || res.Record.ResourceVersion != "999" {
		t.Fatalf("gzip list cached %d objects, record %+v", len(names), res.Record)
	}
}

func TestPolicySharedResourcesCachedForEveryComponent(t *testing.T) {
	p := Policy{Agents: []string{"kubelet"}, Excluded: []string{"calico"}, Shared: []string{"discovery.k8s.io/endpointslices", "/services"}}
	ri := func(comp, group, res string) *wire.RequestInfo {
		return &wire.RequestInfo{IsResource: true, Verb: "list", Group: group, Version: "v1", Resource: res, Component: comp}
	}
	if _, ok := p.Caches(ri("my-app", "discovery.k8s.io", "endpointslices")); !ok {
		t.Fatal("a pool-scope list of any component not cached")
	}
	if _, ok := p.Caches(ri("my-app", "", "services")); !ok {
		t.Fatal("services of any component not cached")
	}
	if _, ok := p.Caches(ri("my-app", "", "configmaps")); ok {
		t.Fatal("configmaps of a component not in Agents cached")
	}
	if _, ok := p.Caches(ri("calico", "", "services")); ok {
		t.Fatal("an excluded component cached")
	}
}

// Queues keyed by owner go away once idle: a node where every pod brings a token of its own must
// not keep a queue (and its batch) per owner for the life of the process.
func TestWriterQueuesOfIdleOwnersAreRetired(t *testing.T) {
	s := openStore(t)
	m := &Manager{Policy: Policy{Agents: []string{"*"}}, Store: s, Writer: NewWriter(s, 0, nil)}
	for i := 0; i < 200; i++ {
		owner := fmt.Sprintf("pod%d@%08x", i, i)
		respond(t, m, http.MethodGet, "/api/v1/namespaces/default/pods/p", owner, podJSON(t, pod("p", "edge-1", "5", nil)))
	}
	deadline := time.Now().Add(30 * time.Second)
	for m.Writer.Queues() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := m.Writer.Queues(); n != 0 {
		t.Fatalf("%d writer queues kept after 200 owners went idle", n)
	}
	// A retired owner writes again: a new queue, and the object is there.
	respond(t, m, http.MethodGet, "/api/v1/namespaces/default/pods/p", "pod7@00000007", podJSON(t, pod("p", "edge-1", "6", nil)))
	h, _, err := s.Get(Key{Resource: Resource{Owner: "pod7@00000007", Version: "v1", Resource: "pods"}, Namespace: "default", Name: "p"})
	if err != nil || h.ResourceVersion != "6" {
		t.Fatalf("after the queue came back: %+v %v", h, err)
	}
}
