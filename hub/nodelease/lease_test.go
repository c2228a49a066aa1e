package nodelease

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/wire"
)

// managedBy is the apiserver's bookkeeping of one writer, the hub, that set fields.
func managedBy(fields string) []metav1.ManagedFieldsEntry {
	return []metav1.ManagedFieldsEntry{{Manager: "nodehub", Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}}
}

// Managed fields as the apiserver records the hub's writes: a full write's, and a renewal's
// after a reset.
const (
	fullWriteFields = `{"f:metadata":{"f:labels":{".":{},"f:pool":{}}},"f:spec":{"f:holderIdentity":{},"f:leaseDurationSeconds":{},"f:renewTime":{}}}`
	renewalFields   = `{"f:spec":{"f:renewTime":{}}}`
)

// fakeCloud is a kube-apiserver's lease endpoint for one node: get, create, and update with
// resourceVersion checks. Tests make it answer other codes through fail.
type fakeCloud struct {
	mu      sync.Mutex
	lease   *wire.Lease // nil: not found
	rv      int
	methods []string
	fail    int // answer this code to every request while non-zero
	bumpRV  bool
	// jsonOnly: answers JSON whatever the client accepts (a server or proxy without protobuf);
	// otherwise, as an apiserver, protobuf to a client that accepts it.
	jsonOnly bool
	// bodies counts request bodies by content type; resets counts the renewals that reset the
	// managed fields.
	bodies map[string]int
	resets int
}

func (c *fakeCloud) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.methods = append(c.methods, r.Method)
	if c.bumpRV && c.lease != nil { // someone else wrote the lease meanwhile
		c.bumpRV = false
		c.rv++
		c.lease.ResourceVersion = strconv.Itoa(c.rv)
	}
	if c.fail != 0 {
		http.Error(w, "failing", c.fail)
		return
	}
	var in wire.Lease
	if r.Body != nil {
		data, _ := io.ReadAll(r.Body)
		if len(data) > 0 {
			ct := r.Header.Get("Content-Type")
			if c.bodies == nil {
				c.bodies = map[string]int{}
			}
			if r.Method == http.MethodPatch { // the renewal's merge patch: the renew time alone
				c.bodies[ct]++
				var p struct {
					Metadata *struct {
						ManagedFields []map[string]any `json:"managedFields"`
					} `json:"metadata"`
					Spec map[string]json.RawMessage `json:"spec"`
				}
				var at metav1.MicroTime
				if ct != "application/merge-patch+json" || json.Unmarshal(data, &p) != nil || len(p.Spec) != 1 || json.Unmarshal(p.Spec["renewTime"], &at) != nil {
					http.Error(w, "bad patch "+string(data), http.StatusBadRequest)
					return
				}
				if c.lease == nil {
					http.Error(w, "not found", http.StatusNotFound)
					return
				}
				if p.Metadata != nil { // the only metadata a renewal sends: the managed fields' reset
					if len(p.Metadata.ManagedFields) != 1 || len(p.Metadata.ManagedFields[0]) != 0 {
						http.Error(w, "bad patch "+string(data), http.StatusBadRequest)
						return
					}
					c.lease.ManagedFields = managedBy(renewalFields) // from now on only what changes
					c.resets++
				}
				c.rv++
				c.lease.Spec.RenewTime, c.lease.ResourceVersion = &at, strconv.Itoa(c.rv)
				c.answer(w, r, http.StatusOK)
				return
			}
			c.bodies[ct]++
			var err error
			if ct == wire.MediaProtobuf {
				_, _, err = wire.DecodeProto(data, &in)
			} else {
				err = json.Unmarshal(data, &in)
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		}
	}
	switch r.Method {
	case http.MethodGet:
		if c.lease == nil {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
	case http.MethodPost:
		if c.lease != nil {
			http.Error(w, "exists", http.StatusConflict)
			return
		}
		c.rv++
		in.UID, in.ResourceVersion, in.ManagedFields = "uid-1", strconv.Itoa(c.rv), managedBy(fullWriteFields)
		c.lease = &in
		c.answer(w, r, http.StatusCreated)
		return
	case http.MethodPut:
		if c.lease == nil {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		if in.ResourceVersion != c.lease.ResourceVersion {
			http.Error(w, "conflict", http.StatusConflict)
			return
		}
		c.rv++
		in.UID, in.ResourceVersion, in.ManagedFields = c.lease.UID, strconv.Itoa(c.rv), managedBy(fullWriteFields)
		c.lease = &in
	}
	c.answer(w, r, http.StatusOK)
}

func (c *fakeCloud) answer(w http.ResponseWriter, r *http.Request, code int) {
	if !c.jsonOnly && strings.HasPrefix(r.Header.Get("Accept"), wire.MediaProtobuf) {
		data, err := wire.EncodeProto("coordination.k8s.io/v1", "Lease", c.lease)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", wire.MediaProtobuf)
		w.WriteHeader(code)
		_, _ = w.Write(data)
		return
	}
	w.Header().Set("Content-Type", wire.MediaJSON)
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(c.lease)
}

func (c *fakeCloud) took() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.methods
	c.methods = nil
	return m
}

// toServer sends path-only requests to one test server, as the hub's backend does.
type toServer struct{ srv *httptest.Server }

func (t toServer) RoundTrip(req *http.Request) (*http.Response, error) {
	u, _ := url.Parse(t.srv.URL)
	req.URL.Scheme, req.URL.Host = u.Scheme, u.Host
	return t.srv.Client().Transport.RoundTrip(req)
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTestLease(t *testing.T) (*Lease, *clock, *fakeCloud, http.RoundTripper, *[]string) {
	t.Helper()
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	l := New("node-a", 40*time.Second, slog.New(slog.DiscardHandler))
	l.now = c.now
	l.kubeletSeen = c.now()
	var renewals []string
	l.Renewals = func(r string) { renewals = append(renewals, r) }
	cloud := &fakeCloud{}
	srv := httptest.NewServer(cloud)
	t.Cleanup(srv.Close)
	return l, c, cloud, toServer{srv}, &renewals
}

// kubelet sends one request for the lease to l, as it would through the proxy port.
func kubelet(t *testing.T, l *Lease, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, path, rd)
	if body != "" {
		r.Header.Set("Content-Type", wire.MediaJSON)
	}
	ri, err := wire.ParseRequest(r)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Owns(ri) {
		t.Fatalf("%s %s: not owned", method, path)
	}
	w := httptest.NewRecorder()
	l.ServeHTTP(w, r, ri)
	return w
}

const leasePath = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"

func kubeletLease(renew time.Time) string {
	return `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"node-a","namespace":"kube-node-lease"},` +
		`"spec":{"holderIdentity":"node-a","leaseDurationSeconds":40,"renewTime":"` + renew.UTC().Format(metav1.RFC3339Micro) + `"}}`
}

func TestOwnsOnlyTheNodesLease(t *testing.T) {
	l := New("node-a", time.Second, slog.New(slog.DiscardHandler))
	for _, tt := range []struct {
		method, path string
		owns         bool
	}{
		{http.MethodGet, leasePath + "/node-a", true},
		{http.MethodPut, leasePath + "/node-a", true},
		{http.MethodPost, leasePath, true},
		{http.MethodGet, leasePath + "/node-b", false},
		{http.MethodPut, leasePath + "/node-b", false},
		{http.MethodDelete, leasePath + "/node-a", false},
		{http.MethodGet, leasePath, false}, // a list
		{http.MethodGet, "/apis/coordination.k8s.io/v1/namespaces/default/leases/node-a", false},
		{http.MethodGet, "/api/v1/namespaces/kube-node-lease/configmaps/node-a", false},
	} {
		ri, err := wire.ParseRequest(httptest.NewRequest(tt.method, tt.path, nil))
		if err != nil {
			t.Fatal(err)
		}
		if got := l.Owns(ri); got != tt.owns {
			t.Errorf("%s %s: Owns = %v, want %v", tt.method, tt.path, got, tt.owns)
		}
	}
}

func TestKubeletIsAnsweredFromTheHubsCopy(t *testing.T) {
	l, c, _, _, _ := newTestLease(t)
	if w := kubelet(t, l, http.MethodGet, leasePath+"/node-a", ""); w.Code != http.StatusNotFound {
		t.Fatalf("get before anything: %d %s", w.Code, w.Body)
	}
	w := kubelet(t, l, http.MethodPost, leasePath, kubeletLease(c.t))
	if w.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", w.Code, w.Body)
	}
	var got wire.Lease
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Name != "node-a" || got.ResourceVersion != "1" || got.Kind != "Lease" || *got.Spec.LeaseDurationSeconds != 40 {
		t.Fatalf("create answered %+v", got)
	}
	if w := kubelet(t, l, http.MethodPut, leasePath+"/node-a", kubeletLease(c.t.Add(time.Second))); w.Code != http.StatusOK {
		t.Fatalf("update: %d %s", w.Code, w.Body)
	}
	if w := kubelet(t, l, http.MethodGet, leasePath+"/node-a", ""); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"renewTime"`) {
		t.Fatalf("get: %d %s", w.Code, w.Body)
	}
	r := httptest.NewRequest(http.MethodGet, leasePath+"/node-a", nil)
	r.Header.Set("Accept", wire.MediaProtobuf)
	ri, _ := wire.ParseRequest(r)
	pw := httptest.NewRecorder()
	l.ServeHTTP(pw, r, ri)
	if pw.Code != http.StatusOK || pw.Header().Get("Content-Type") != wire.MediaProtobuf {
		t.Fatalf("protobuf get: %d %q", pw.Code, pw.Header().Get("Content-Type"))
	}
	var back wire.Lease
	if _, _, err := wire.DecodeProto(pw.Body.Bytes(), &back); err != nil || back.Name != "node-a" {
		t.Fatalf("protobuf answer: %v %+v", err, back)
	}
}

func TestKubeletsBadWritesAreRefused(t *testing.T) {
	l, c, _, _, _ := newTestLease(t)
	if w := kubelet(t, l, http.MethodPut, leasePath+"/node-a", "{not json"); w.Code != http.StatusBadRequest {
		t.Errorf("bad body: %d", w.Code)
	}
	other := strings.Replace(kubeletLease(c.t), `"name":"node-a"`, `"name":"node-b"`, 1)
	if w := kubelet(t, l, http.MethodPost, leasePath, other); w.Code != http.StatusForbidden {
		t.Errorf("another node's lease: %d", w.Code)
	}
	huge := strings.Repeat(" ", maxBody+1)
	if w := kubelet(t, l, http.MethodPut, leasePath+"/node-a", huge); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "larger") {
		t.Errorf("oversized body: %d %s", w.Code, w.Body)
	}
	if w := kubelet(t, l, http.MethodGet, leasePath+"/node-a", ""); w.Code != http.StatusNotFound {
		t.Errorf("after refused writes the hub has no lease, got %d", w.Code)
	}
}

// The hub writes its lease in protobuf, and reads the answer in protobuf or, from a server that
// only answers JSON, in JSON.
func TestHeartbeatCreatesThenRenewsWithKubeletsSpec(t *testing.T) {
	for _, jsonOnly := range []bool{false, true} {
		t.Run(map[bool]string{false: "protobuf", true: "json answers"}[jsonOnly], func(t *testing.T) {
			heartbeatCreatesThenRenews(t, jsonOnly)
		})
	}
}

func heartbeatCreatesThenRenews(t *testing.T, jsonOnly bool) {
	l, c, cloud, rt, renewals := newTestLease(t)
	cloud.jsonOnly = jsonOnly
	l.Labels = map[string]string{"pool": "p1"}
	ctx := context.Background()
	if err := l.Heartbeat(ctx, rt); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cloud.took(), ","); got != "GET,POST" {
		t.Fatalf("first heartbeat without a cloud lease sent %s, want GET,POST", got)
	}
	if cloud.lease.Labels["pool"] != "p1" || *cloud.lease.Spec.HolderIdentity != "node-a" {
		t.Fatalf("created %+v", cloud.lease)
	}

	kubelet(t, l, http.MethodPut, leasePath+"/node-a", kubeletLease(c.t))
	c.t = c.t.Add(10 * time.Second)
	if err := l.Heartbeat(ctx, rt); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cloud.took(), ","); got != "PATCH" {
		t.Fatalf("renewal sent %s, want PATCH (the renew time alone)", got)
	}
	if !cloud.lease.Spec.RenewTime.Time.Equal(c.t) {
		t.Fatalf("cloud renew time %v, want the hub's now %v", cloud.lease.Spec.RenewTime.Time, c.t)
	}
	if w := kubelet(t, l, http.MethodGet, leasePath+"/node-a", ""); !strings.Contains(w.Body.String(), `"uid":"uid-1"`) {
		t.Fatalf("kubelet is not shown the cloud's object: %s", w.Body)
	}
	if strings.Join(*renewals, ",") != "ok,ok" {
		t.Fatalf("renewals counted %v", *renewals)
	}
	if len(cloud.bodies) != 2 || cloud.bodies[wire.MediaProtobuf] != 1 || cloud.bodies["application/merge-patch+json"] != 1 {
		t.Fatalf("request bodies by content type: %v, want the creation in protobuf, the renewal a merge patch", cloud.bodies)
	}
}

func TestHeartbeatRetriesOnceOnConflict(t *testing.T) {
	l, _, cloud, rt, renewals := newTestLease(t)
	ctx := context.Background()
	if err := l.Heartbeat(ctx, rt); err != nil {
		t.Fatal(err)
	}
	cloud.took()
	cloud.bumpRV = true
	l.Labels = map[string]string{"pool": "p2"} // more than the renew time changes: the whole lease
	if err := l.Heartbeat(ctx, rt); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cloud.took(), ","); got != "PUT,GET,PUT" {
		t.Fatalf("conflicting renewal sent %s, want PUT,GET,PUT", got)
	}
	if strings.Join(*renewals, ",") != "ok,conflict,ok" {
		t.Fatalf("renewals counted %v", *renewals)
	}
}

func TestHeartbeatOnlyReadsAfterKubeletsGrace(t *testing.T) {
	l, c, cloud, rt, _ := newTestLease(t)
	ctx := context.Background()
	if err := l.Heartbeat(ctx, rt); err != nil {
		t.Fatal(err)
	}
	cloud.took()
	c.t = c.t.Add(41 * time.Second) // kubelet silent past its grace
	if err := l.Heartbeat(ctx, rt); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cloud.took(), ","); got != "GET" {
		t.Fatalf("heartbeat after the grace sent %s, want GET only", got)
	}
	kubelet(t, l, http.MethodPut, leasePath+"/node-a", kubeletLease(c.t))
	if err := l.Heartbeat(ctx, rt); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cloud.took(), ","); got != "PATCH" {
		t.Fatalf("heartbeat once kubelet is back sent %s, want PATCH", got)
	}
}

func TestHeartbeatVerdicts(t *testing.T) {
	l, _, cloud, rt, _ := newTestLease(t)
	ctx := context.Background()
	cloud.fail = http.StatusServiceUnavailable
	if err := l.Heartbeat(ctx, rt); err == nil {
		t.Fatal("a 503 is a failed heartbeat")
	}
	cloud.fail = http.StatusForbidden
	if err := l.Heartbeat(ctx, rt); err != nil {
		t.Fatalf("a 403 still means the server is alive: %v", err)
	}
	cloud.fail = 0
	down := toServer{httptest.NewServer(http.NotFoundHandler())}
	down.srv.Close()
	if err := l.Heartbeat(ctx, down); err == nil {
		t.Fatal("an unreachable server is a failed heartbeat")
	}
}

func TestNewerRV(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want bool
	}{{"10", "9", true}, {"9", "10", false}, {"5", "5", true}, {"x", "10", true}} {
		if got := newerRV(tt.a, tt.b); got != tt.want {
			t.Errorf("newerRV(%q, %q) = %v", tt.a, tt.b, got)
		}
	}
}

// A label the hub sets while it runs (the pool leader's mark) goes on with the next renewal (the
// whole lease: more than the renew time changed) and comes off again the same way.
func TestHeartbeatSetsAndRemovesAMark(t *testing.T) {
	l, _, cloud, rt, _ := newTestLease(t)
	ctx := context.Background()
	if err := l.Heartbeat(ctx, rt); err != nil {
		t.Fatal(err)
	}
	cloud.took()
	l.SetLabel("lead", "p1")
	if err := l.Heartbeat(ctx, rt); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cloud.took(), ","); got != "PUT" || cloud.lease.Labels["lead"] != "p1" {
		t.Fatalf("setting the mark sent %s, labels %v", got, cloud.lease.Labels)
	}
	if err := l.Heartbeat(ctx, rt); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cloud.took(), ","); got != "PATCH" {
		t.Fatalf("the next renewal sent %s, want PATCH", got)
	}
	l.SetLabel("lead", "")
	if err := l.Heartbeat(ctx, rt); err != nil {
		t.Fatal(err)
	}
	if _, there := cloud.lease.Labels["lead"]; there {
		t.Fatalf("the mark stayed: %v", cloud.lease.Labels)
	}
}

// The apiserver answers every renewal with the whole lease, managed fields and all: the first
// renewal after a full write (the creation, a mark set) resets them, so the answers carry only
// the renew time's entry; later renewals send the renew time alone.
func TestRenewalsResetTheManagedFieldsOnceAfterAFullWrite(t *testing.T) {
	l, _, cloud, rt, _ := newTestLease(t)
	ctx := context.Background()
	beat := func(want string, resets int) {
		t.Helper()
		if err := l.Heartbeat(ctx, rt); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(cloud.took(), ","); got != want || cloud.resets != resets {
			t.Fatalf("heartbeat sent %s with %d resets so far, want %s with %d", got, cloud.resets, want, resets)
		}
	}
	beat("GET,POST", 0)
	if string(cloud.lease.ManagedFields[0].FieldsV1.Raw) != fullWriteFields {
		t.Fatal("the fake cloud does not record a full write")
	}
	beat("PATCH", 1)
	if string(cloud.lease.ManagedFields[0].FieldsV1.Raw) != renewalFields {
		t.Fatalf("managed fields after the reset: %s", cloud.lease.ManagedFields[0].FieldsV1.Raw)
	}
	beat("PATCH", 1)
	beat("PATCH", 1)
	l.SetLabel("lead", "p1")
	beat("PUT", 1)
	beat("PATCH", 2)
	beat("PATCH", 2)
}

// A hub that cannot serve its pool takes its pool marks off its lease (SetLabel and SetAnnotation
// with ""), and puts them back when it can: its lease then costs what a node-level hub's does.
func TestHeartbeatTakesMarksOffAndPutsThemBack(t *testing.T) {
	l, _, cloud, rt, _ := newTestLease(t)
	ctx := context.Background()
	l.SetLabel("pool", "p1")
	l.SetAnnotation("addr", "10.0.0.1:10269")
	if err := l.Heartbeat(ctx, rt); err != nil {
		t.Fatal(err)
	}
	if cloud.lease.Labels["pool"] != "p1" || cloud.lease.Annotations["addr"] != "10.0.0.1:10269" {
		t.Fatalf("marks not put: %v %v", cloud.lease.Labels, cloud.lease.Annotations)
	}
	l.SetLabel("pool", "")
	l.SetAnnotation("addr", "")
	if err := l.Heartbeat(ctx, rt); err != nil {
		t.Fatal(err)
	}
	if _, ok := cloud.lease.Labels["pool"]; ok {
		t.Fatalf("label kept: %v", cloud.lease.Labels)
	}
	if _, ok := cloud.lease.Annotations["addr"]; ok {
		t.Fatalf("annotation kept: %v", cloud.lease.Annotations)
	}
}

// A lease write in CBOR (kubelet with ClientsPreferCBOR) is answered 415, which client-go takes
// as its cue to send JSON from then on; a 400 would fail kubelet's lease writes forever.
func TestKubeletsCBORLeaseWriteIsUnsupportedMediaType(t *testing.T) {
	l, c, _, _, _ := newTestLease(t)
	for _, method := range []string{http.MethodPost, http.MethodPut} {
		path := leasePath
		if method == http.MethodPut {
			path += "/node-a"
		}
		r := httptest.NewRequest(method, path, strings.NewReader("\xd9\xd9\xf7CBOR"))
		r.Header.Set("Content-Type", "application/cbor")
		ri, err := wire.ParseRequest(r)
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		l.ServeHTTP(w, r, ri)
		if w.Code != http.StatusUnsupportedMediaType || !strings.Contains(w.Body.String(), `"kind":"Status"`) {
			t.Fatalf("%s in CBOR: %d %s, want a 415 Status", method, w.Code, w.Body)
		}
	}
	if w := kubelet(t, l, http.MethodPost, leasePath, kubeletLease(c.t)); w.Code != http.StatusCreated {
		t.Fatalf("then in JSON: %d %s", w.Code, w.Body)
	}
}
