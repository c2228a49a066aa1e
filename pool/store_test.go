package pool

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"nodehub/wire"
)

func svc(name string, rv int, label string) *object {
	raw := fmt.Sprintf(`{"kind":"Service","apiVersion":"v1","metadata":{"name":%q,"namespace":"ns","resourceVersion":"%d","labels":{"app":%q}},"spec":{"clusterIP":"10.0.0.%d"}}`, name, rv, label, rv)
	o, err := newObject([]byte(raw), Resource{Version: "v1", Resource: "services"})
	if err != nil {
		panic(err)
	}
	return o
}

func request(t *testing.T, query string) *wire.RequestInfo {
	t.Helper()
	u, _ := url.Parse("/api/v1/namespaces/ns/services?" + query)
	ri, err := wire.ParseURL(http.MethodGet, u)
	if err != nil {
		t.Fatal(err)
	}
	ri.Accept = wire.MediaType{Type: wire.MediaJSON}
	return ri
}

func watchBody(t *testing.T, st *Store, query string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	st.ServeWatch(rec, r, Serving{Info: request(t, "watch=1&timeoutSeconds=1&"+query)})
	return rec.Code, rec.Body.String()
}

func TestStoreListWatchResumeAndExpire(t *testing.T) {
	st := NewStore(Resource{Version: "v1", Resource: "services"})
	st.MaxEvents = 3
	st.replace([]*object{svc("a", 10, "x"), svc("b", 11, "y")}, 12, "v1", "Service")

	rec := httptest.NewRecorder()
	st.ServeList(rec, Serving{Info: request(t, "labelSelector=app%3Dx")})
	if body := rec.Body.String(); !strings.Contains(body, `"name":"a"`) || strings.Contains(body, `"name":"b"`) || !strings.Contains(body, `"resourceVersion":"12"`) {
		t.Fatalf("list: %s", body)
	}

	st.apply(wire.EventModified, svc("a", 13, "x"))
	st.apply(wire.EventModified, svc("b", 14, "x")) // enters the selection
	code, body := watchBody(t, st, "resourceVersion=12&labelSelector=app%3Dx")
	if code != 200 || strings.Count(body, "\n") != 2 || !strings.Contains(body, `{"type":"MODIFIED"`) || !strings.Contains(body, `{"type":"ADDED","object":{"kind":"Service","apiVersion":"v1","metadata":{"name":"b"`) {
		t.Fatalf("watch from 12: %d %s", code, body)
	}

	// A re-list turns the difference into events: a gone, c new.
	st.replace([]*object{svc("b", 14, "x"), svc("c", 15, "x")}, 16, "v1", "Service")
	code, body = watchBody(t, st, "resourceVersion=14")
	if code != 200 || !strings.Contains(body, `{"type":"ADDED","object":{"kind":"Service","apiVersion":"v1","metadata":{"name":"c"`) || !strings.Contains(body, `{"type":"DELETED","object":{"kind":"Service","apiVersion":"v1","metadata":{"name":"a"`) {
		t.Fatalf("watch after re-list: %d %s", code, body)
	}

	// The window holds 3 events: resuming from 12 lost some.
	code, body = watchBody(t, st, "resourceVersion=12")
	if code != http.StatusGone || !strings.Contains(body, `"reason":"Expired"`) {
		t.Fatalf("too old: %d %s", code, body)
	}
	// resourceVersion=0: the current objects as ADDED.
	_, body = watchBody(t, st, "resourceVersion=0")
	if strings.Count(body, `"type":"ADDED"`) != 2 {
		t.Fatalf("initial: %s", body)
	}
}
