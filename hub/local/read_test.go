package local

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/cache"
	"nodehub/wire"
)

// chunkWriter records the largest single write: an answer built whole arrives in one.
type chunkWriter struct {
	*httptest.ResponseRecorder
	largest int
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	c.largest = max(c.largest, len(p))
	return c.ResponseRecorder.Write(p)
}

func bigEvent(t *testing.T, i int, protobuf bool) (*cache.Header, []byte) {
	ev := &corev1.Event{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("e%02d", i), Namespace: "default", ResourceVersion: fmt.Sprint(100 + i)},
		Message:    strings.Repeat("m", 1<<20)}
	var body []byte
	var err error
	ct := wire.MediaJSON
	if protobuf {
		body, err = wire.EncodeProto("v1", "Event", ev)
		ct = wire.MediaProtobuf
	} else {
		body, err = json.Marshal(ev)
	}
	if err != nil {
		t.Fatal(err)
	}
	return &cache.Header{ContentType: ct, APIVersion: "v1", Kind: "Event", Namespace: "default", Name: ev.Name, ResourceVersion: ev.ResourceVersion}, body
}

// An offline list of big objects is written as it is read, never built whole: no single write
// holds more than an item and the buffer, in JSON and in protobuf, and the answer decodes.
func TestOfflineListStreams(t *testing.T) {
	for _, stored := range []bool{false, true} {
		for _, accept := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
			st, err := cache.Open(t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			res := cache.Resource{Owner: "app", Version: "v1", Resource: "events"}
			for i := 0; i < 12; i++ {
				h, body := bigEvent(t, i, stored)
				if err := st.Put(cache.Key{Resource: res, Namespace: "default", Name: h.Name}, h, body); err != nil {
					t.Fatal(err)
				}
			}
			p := &Proxy{Store: st}
			r := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/default/events", nil)
			r.Header.Set("Accept", accept)
			ri, err := wire.ParseRequest(r)
			if err != nil {
				t.Fatal(err)
			}
			w := &chunkWriter{ResponseRecorder: httptest.NewRecorder()}
			p.ServeHTTP(w, r, &Request{Info: ri, Own: "app"})
			if w.Code != http.StatusOK {
				t.Fatalf("%d %s", w.Code, w.Body.String()[:min(200, w.Body.Len())])
			}
			if w.largest > 2<<20 {
				t.Errorf("stored protobuf %v, accept %s: a write of %d bytes: the list was built whole", stored, accept, w.largest)
			}
			var l corev1.EventList
			if strings.Contains(accept, "protobuf") {
				if cl := w.Header().Get("Content-Length"); cl != fmt.Sprint(w.Body.Len()) {
					t.Errorf("Content-Length %s for %d bytes", cl, w.Body.Len())
				}
				_, _, err = wire.DecodeProto(w.Body.Bytes(), &l)
			} else {
				err = json.Unmarshal(w.Body.Bytes(), &l)
			}
			if err != nil || len(l.Items) != 12 || l.Items[11].Name != "e11" || len(l.Items[3].Message) != 1<<20 || l.ResourceVersion != "111" {
				t.Fatalf("stored protobuf %v, accept %s: %v, %d items, rv %q", stored, accept, err, len(l.Items), l.ResourceVersion)
			}
		}
	}
}

// hookWriter calls once on its first write (the protobuf list is then in its writing pass).
type hookWriter struct {
	*httptest.ResponseRecorder
	once func()
}

func (h *hookWriter) Write(p []byte) (int, error) {
	if h.once != nil {
		h.once()
		h.once = nil
	}
	return h.ResponseRecorder.Write(p)
}

// Objects that change, go or come between the protobuf list's sizing and writing passes are
// left out and their bytes padded: the body is exactly as long as announced and decodes.
func TestOfflineProtobufListSurvivesChangesBetweenPasses(t *testing.T) {
	st, err := cache.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	res := cache.Resource{Owner: "kubelet", Version: "v1", Resource: "events"}
	put := func(i int, msg string) {
		h, body := bigEvent(t, i, true)
		if msg != "" {
			ev := &corev1.Event{}
			if _, _, err := wire.DecodeProto(body, ev); err != nil {
				t.Fatal(err)
			}
			ev.Message = msg
			body, _ = wire.EncodeProto("v1", "Event", ev)
		}
		if err := st.Put(cache.Key{Resource: res, Namespace: "default", Name: h.Name}, h, body); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 12; i++ {
		put(i, "")
	}
	r := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/default/events", nil)
	r.Header.Set("Accept", "application/vnd.kubernetes.protobuf")
	r.Header.Set("User-Agent", "kubelet/1.34")
	ri, _ := wire.ParseRequest(r)
	w := &hookWriter{ResponseRecorder: httptest.NewRecorder(), once: func() {
		put(5, "changed")
		_ = st.Delete(cache.Key{Resource: res, Namespace: "default", Name: "e07"})
		put(20, "")
	}}
	(&Proxy{Store: st}).ServeHTTP(w, r, &Request{Info: ri, Own: "kubelet", Shared: true})
	if cl := w.Header().Get("Content-Length"); cl != fmt.Sprint(w.Body.Len()) {
		t.Fatalf("Content-Length %s for %d bytes", cl, w.Body.Len())
	}
	var l corev1.EventList
	if _, _, err := wire.DecodeProto(w.Body.Bytes(), &l); err != nil {
		t.Fatal(err)
	}
	// What the writing pass sees of the changes depends on the store (one that reads a snapshot
	// per pass sees none): every object sized and unchanged is there, in order, nothing else.
	var names []string
	for _, ev := range l.Items {
		names = append(names, ev.Name)
		if ev.Message == "changed" || ev.Name == "e20" {
			t.Fatalf("%s as it was after the sizing pass is in the list", ev.Name)
		}
	}
	got := strings.Join(names, ",")
	if got != "e00,e01,e02,e03,e04,e06,e08,e09,e10,e11" && got != "e00,e01,e02,e03,e04,e05,e06,e07,e08,e09,e10,e11" {
		t.Fatalf("items %s", got)
	}
}

// Clients that stop reading an offline list lose it after the write timeout: they do not keep
// the pods' stream slots from the next client.
func TestStalledOfflineListsFreeTheirSlots(t *testing.T) {
	st, err := cache.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	res := cache.Resource{Owner: "app@x", Version: "v1", Resource: "events"}
	for i := 0; i < 12; i++ {
		h, body := bigEvent(t, i, false)
		if err := st.Put(cache.Key{Resource: res, Namespace: "default", Name: h.Name}, h, body); err != nil {
			t.Fatal(err)
		}
	}
	p := &Proxy{Store: st, WriteTimeout: 300 * time.Millisecond}
	p.slotsOnce.Do(func() { p.slots = make(chan struct{}, 2) }) // made here, so the test can watch them
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ri, _ := wire.ParseRequest(r)
		p.ServeHTTP(w, r, &Request{Info: ri, Own: "app@x"})
	}))
	defer srv.Close()
	for i := 0; i < 2; i++ { // two clients that never read: both slots
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /api/v1/namespaces/default/events HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	// Both slots taken (however long a loaded machine takes to get there), before the third asks.
	for deadline := time.Now().Add(30 * time.Second); len(p.slots) < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d slots taken by the stalled clients", len(p.slots))
		}
	}
	cl := &http.Client{Timeout: 30 * time.Second}
	resp, err := cl.Get(srv.URL + "/api/v1/namespaces/default/events")
	if err != nil {
		t.Fatalf("a third client behind two stalled ones: %v", err)
	}
	defer resp.Body.Close()
	n, _ := io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK || n < 12<<20 {
		t.Fatalf("%d, %d bytes", resp.StatusCode, n)
	}
}
