package cache

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"nodehub/wire"
)

// watchListQuery is what client-go ≥ 1.35's reflector sends instead of a LIST.
const watchListQuery = "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"

// watchStream builds a watch stream (JSON or protobuf) of events.
type watchStream struct {
	t   *testing.T
	pb  bool
	buf []byte
}

func (w *watchStream) obj(p *corev1.Pod) []byte {
	if w.pb {
		b, err := wire.EncodeProto("v1", "Pod", p)
		if err != nil {
			w.t.Fatal(err)
		}
		return b
	}
	return podJSON(w.t, p)
}

func (w *watchStream) event(typ string, obj []byte) *watchStream {
	ev := wire.WatchEvent{Type: typ, Object: obj}
	if w.pb {
		w.buf = append(w.buf, wire.EncodeProtoWatchEvent(ev)...)
	} else {
		w.buf = append(w.buf, wire.EncodeJSONWatchEvent(ev)...)
	}
	return w
}

func (w *watchStream) add(typ string, p *corev1.Pod) *watchStream { return w.event(typ, w.obj(p)) }

func (w *watchStream) bookmark(rv string, end bool) *watchStream {
	return w.event(wire.EventBookmark, wire.BookmarkObject("v1", "Pod", rv, end, w.pb))
}

// tee passes a response through the manager as a client reads it; a cut one ends without EOF.
func tee(t *testing.T, m *Manager, url, component string, pb bool, body []byte, cut bool) {
	t.Helper()
	r, _ := http.NewRequest("GET", "http://hub"+url, nil)
	r.Header.Set("User-Agent", component+"/v1")
	ri, err := wire.ParseRequest(r)
	if err != nil {
		t.Fatal(err)
	}
	ct := wire.MediaJSON
	if pb {
		ct = wire.MediaProtobuf + ";stream=watch"
	}
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {ct}}, Body: io.NopCloser(bytes.NewReader(body))}
	tb := m.Tee(ri, component, resp)
	if tb == nil {
		t.Fatalf("%s not cached", url)
	}
	buf := make([]byte, 11)
	for left := len(body); !cut || left > 0; {
		n, err := tb.Read(buf)
		if err != nil {
			break
		}
		left -= n
	}
	tb.Close() // before EOF when cut: the stream ends early
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Writer.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// A watch-list's initial events are a list: recorded at the initial-events-end bookmark, complete,
// at its resourceVersion, the scope reconciled as a re-list does; later events keep it current.
// JSON and protobuf streams alike.
func TestWatchListIsRecordedAsAList(t *testing.T) {
	for _, pb := range []bool{false, true} {
		name := "json"
		if pb {
			name = "protobuf"
		}
		t.Run(name, func(t *testing.T) {
			s := openStore(t)
			m := newManager(s)
			m.Writer.Delay = time.Hour // the bookmark writes, not the timer
			a := pod("a", "edge-1", "10", nil)
			b := pod("b", "edge-1", "11", nil)
			respond(t, m, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1", "kubelet", listBody(t, "100", a, b))

			url := "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1&" + watchListQuery
			w := &watchStream{t: t, pb: pb}
			w.add(wire.EventAdded, pod("b", "edge-1", "150", nil)).add(wire.EventAdded, pod("c", "edge-1", "160", nil)).bookmark("200", true)
			tee(t, m, url, "kubelet", pb, w.buf, false)
			got, res := names(t, s, "kubelet", "", "", "spec.nodeName=edge-1")
			if strings.Join(got, ",") != "b,c" || res.Record == nil || !res.Record.Complete || res.Record.ResourceVersion != "200" || res.Partial {
				t.Fatalf("watch-list recorded %v %+v", got, res.Record)
			}
			if strings.Join(res.Record.Keys, ",") != "default/b,default/c" || res.Record.Kind != "Pod" || res.Record.APIVersion != "v1" {
				t.Fatalf("record %+v", res.Record)
			}
			it, err := s.GetObject(Key{Resource: Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}, Namespace: "default", Name: "b"})
			if err != nil || it.Header.ResourceVersion != "150" || !bytes.Equal(it.Body, w.obj(pod("b", "edge-1", "150", nil))) {
				t.Fatalf("b stored %v %s", err, it.Body)
			}

			// The same watch-list again: nothing changed, nothing is written.
			m.Writer.Delay = 0
			files := s.Stats().FilesWritten
			w = &watchStream{t: t, pb: pb}
			w.add(wire.EventAdded, pod("b", "edge-1", "150", nil)).add(wire.EventAdded, pod("c", "edge-1", "160", nil)).bookmark("200", true)
			tee(t, m, url, "kubelet", pb, w.buf, false)
			if n := s.Stats().FilesWritten - files; n != 0 {
				t.Fatalf("an unchanged watch-list wrote %d records", n)
			}

			// Again, then the events after its bookmark: they keep it current.
			w = &watchStream{t: t, pb: pb}
			w.add(wire.EventAdded, pod("b", "edge-1", "150", nil)).add(wire.EventAdded, pod("c", "edge-1", "160", nil)).bookmark("200", true)
			w.add(wire.EventModified, pod("c", "edge-1", "210", map[string]string{"v": "2"})).add(wire.EventAdded, pod("d", "edge-1", "220", nil))
			w.add(wire.EventDeleted, pod("b", "edge-1", "230", nil)).bookmark("300", false)
			tee(t, m, url, "kubelet", pb, w.buf, false)
			got, res = names(t, s, "kubelet", "", "", "spec.nodeName=edge-1")
			if strings.Join(got, ",") != "c,d" || res.Record.ResourceVersion != "300" || !res.Record.Complete {
				t.Fatalf("after later events %v %+v", got, res.Record)
			}
		})
	}
}

// A watch-list cut before its initial-events-end bookmark records nothing complete, and the list
// recorded before stays whole: its resourceVersion, its keys, none of its objects deleted.
func TestWatchListCutBeforeItsBookmarkKeepsThePriorList(t *testing.T) {
	for _, pb := range []bool{false, true} {
		s := openStore(t)
		m := newManager(s)
		a := pod("a", "edge-1", "10", nil)
		b := pod("b", "edge-1", "11", nil)
		url := "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1&" + watchListQuery
		w := &watchStream{t: t, pb: pb}
		w.add(wire.EventAdded, a).add(wire.EventAdded, b).bookmark("100", true)
		tee(t, m, url, "kubelet", pb, w.buf, false)

		// Cut: only c arrived, and a mid-list bookmark (ignored: the list is not whole yet).
		w = &watchStream{t: t, pb: pb}
		w.add(wire.EventAdded, pod("c", "edge-1", "150", nil)).bookmark("160", false)
		tee(t, m, url, "kubelet", pb, w.buf, true)
		got, res := names(t, s, "kubelet", "", "", "spec.nodeName=edge-1")
		if strings.Join(got, ",") != "a,b,c" || res.Record.ResourceVersion != "100" || !res.Record.Complete || strings.Join(res.Record.Keys, ",") != "default/a,default/b" {
			t.Fatalf("pb=%v: after a cut watch-list %v %+v", pb, got, res.Record)
		}

		// A watch-list of a scope never listed, cut: no record at all.
		w = &watchStream{t: t, pb: pb}
		w.add(wire.EventAdded, pod("x", "edge-2", "170", nil))
		tee(t, m, "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-2&"+watchListQuery, "kubelet", pb, w.buf, true)
		if _, res := names(t, s, "kubelet", "", "", "spec.nodeName=edge-2"); res.Record != nil {
			t.Fatalf("pb=%v: a cut watch-list recorded %+v", pb, res.Record)
		}
		// Nor does a plain watch's bookmark make a list.
		w = &watchStream{t: t, pb: pb}
		w.add(wire.EventAdded, pod("y", "edge-3", "180", nil)).bookmark("190", true)
		tee(t, m, "/api/v1/pods?watch=1&allowWatchBookmarks=true&fieldSelector=spec.nodeName%3Dedge-3", "kubelet", pb, w.buf, false)
		if _, res := names(t, s, "kubelet", "", "", "spec.nodeName=edge-3"); res.Record != nil {
			t.Fatalf("pb=%v: a plain watch recorded %+v", pb, res.Record)
		}
	}
}

// Each scope (namespace, label selector, field selector, owner) is its own list, as for LISTs; an
// empty watch-list is an empty list with its items' type.
func TestWatchListScopes(t *testing.T) {
	s := openStore(t)
	m := newManager(s)
	x := pod("x", "edge-1", "10", map[string]string{"app": "x"})
	y := pod("y", "edge-1", "11", map[string]string{"app": "y"})
	w := &watchStream{t: t}
	w.add(wire.EventAdded, x).bookmark("100", true)
	tee(t, m, "/api/v1/namespaces/default/pods?labelSelector=app%3Dx&"+watchListQuery, "kube-proxy", false, w.buf, false)
	w = &watchStream{t: t}
	w.add(wire.EventAdded, x).add(wire.EventAdded, y).bookmark("101", true)
	tee(t, m, "/api/v1/pods?"+watchListQuery, "kube-proxy", false, w.buf, false)
	w = &watchStream{t: t}
	w.bookmark("102", true)
	tee(t, m, "/api/v1/namespaces/other/pods?"+watchListQuery, "kube-proxy", false, w.buf, false)

	if got, res := names(t, s, "kube-proxy", "default", "app=x", ""); strings.Join(got, ",") != "x" || res.Record.ResourceVersion != "100" {
		t.Fatalf("label scope %v %+v", got, res.Record)
	}
	if got, res := names(t, s, "kube-proxy", "", "", ""); strings.Join(got, ",") != "x,y" || res.Record.ResourceVersion != "101" {
		t.Fatalf("cluster scope %v %+v", got, res.Record)
	}
	if got, res := names(t, s, "kube-proxy", "other", "", ""); len(got) != 0 || res.Record == nil || res.Record.Namespace != "other" || !res.Record.Complete || res.Record.Kind != "Pod" {
		t.Fatalf("empty namespace scope %v %+v", got, res.Record)
	}
	// The label scope re-listed without x: x stays, the cluster-wide list still holds it.
	w = &watchStream{t: t}
	w.bookmark("110", true)
	tee(t, m, "/api/v1/namespaces/default/pods?labelSelector=app%3Dx&"+watchListQuery, "kube-proxy", false, w.buf, false)
	if got, _ := names(t, s, "kube-proxy", "", "", ""); strings.Join(got, ",") != "x,y" {
		t.Fatalf("x deleted though another list holds it: %v", got)
	}
	if _, res := names(t, s, "kubelet", "", "", ""); res.Record != nil {
		t.Fatalf("kubelet sees kube-proxy's list")
	}
}
