package hub

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/hub/nodelease"
	"nodehub/pool"
	"nodehub/wire"
)

// leaseWrites is a cloud without the node's lease: it answers the GET with 404 and keeps the
// lease each POST creates.
type leaseWrites struct{ created []*wire.Lease }

func (c *leaseWrites) RoundTrip(req *http.Request) (*http.Response, error) {
	resp := &http.Response{StatusCode: http.StatusNotFound, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(""))}
	if req.Method == http.MethodPost {
		data, _ := io.ReadAll(req.Body)
		var l wire.Lease
		if _, _, err := wire.DecodeProto(data, &l); err != nil {
			return nil, err
		}
		c.created = append(c.created, &l)
		resp.StatusCode = http.StatusCreated
		resp.Header.Set("Content-Type", wire.MediaProtobuf)
		resp.Body = io.NopCloser(strings.NewReader(string(data)))
	}
	return resp, nil
}

// Issue 29 (5): every renewal's answer carries the lease's marks back, 8,640 times a day, so a
// hub that stands for the pool carries the pool's label alone; only the leader's lease says its
// pool address (and that it leads). A hub that cannot serve the pool carries nothing.
func TestLeaseModeOnlyTheLeaderSaysItsAddress(t *testing.T) {
	for _, c := range []struct {
		name          string
		stands, leads bool
		labels, ann   map[string]string
	}{
		{"cannot serve", false, false, map[string]string{}, map[string]string{}},
		{"stands", true, false, map[string]string{pool.LabelPool: "pool-a"}, map[string]string{}},
		{"leads", true, true, map[string]string{pool.LabelPool: "pool-a", pool.LabelLeader: "pool-a"}, map[string]string{pool.AnnotationAddress: "10.0.0.1:10263"}},
	} {
		lease := nodelease.New("edge-1", time.Hour, slog.New(slog.DiscardHandler))
		m := &leaseMarks{lease: lease, pool: "pool-a", addr: "10.0.0.1:10263"}
		m.set(func(m *leaseMarks) { m.stands = true })
		m.set(func(m *leaseMarks) { m.leads = true }) // as it was: a leader that steps down
		m.set(func(m *leaseMarks) { m.stands, m.leads = c.stands, c.leads })
		cloud := &leaseWrites{}
		if err := lease.Heartbeat(context.Background(), cloud); err != nil || len(cloud.created) != 1 {
			t.Fatalf("%s: heartbeat %v, %d leases created", c.name, err, len(cloud.created))
		}
		got := cloud.created[0]
		if !maps.Equal(got.Labels, c.labels) || !maps.Equal(got.Annotations, c.ann) {
			t.Errorf("%s: the lease carries labels %v, annotations %v; want %v, %v", c.name, got.Labels, got.Annotations, c.labels, c.ann)
		}
	}
}

// markedCloud holds the node's lease as lease mode left it and keeps what a PUT writes.
type markedCloud struct {
	lease *wire.Lease
	put   []*wire.Lease
}

func (c *markedCloud) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPut {
		data, _ := io.ReadAll(req.Body)
		var l wire.Lease
		if _, _, err := wire.DecodeProto(data, &l); err != nil {
			return nil, err
		}
		c.put = append(c.put, &l)
		c.lease = &l
	}
	data, err := wire.EncodeProto("coordination.k8s.io/v1", "Lease", c.lease)
	if err != nil {
		return nil, err
	}
	h := http.Header{"Content-Type": {wire.MediaProtobuf}}
	return &http.Response{StatusCode: http.StatusOK, Header: h, Body: io.NopCloser(strings.NewReader(string(data)))}, nil
}

// A hub that ran in lease mode and now runs in another takes the marks off its lease: its lease
// would otherwise still stand for the pool (the others elect it, and it never leads), and carry
// them back in every renewal's answer.
func TestLeaseMarksClearedOutsideLeaseMode(t *testing.T) {
	labels, annotations := pool.LeaseMarks("pool-a", "10.0.0.1:10263", true, true)
	labels["other"] = "kept"
	holder, dur := "edge-1", int32(40)
	cloud := &markedCloud{lease: &wire.Lease{ObjectMeta: metav1.ObjectMeta{Name: "edge-1", Namespace: "kube-node-lease", UID: "u1", ResourceVersion: "5",
		Labels: labels, Annotations: annotations}, Spec: wire.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur}}}
	lease := nodelease.New("edge-1", time.Hour, slog.New(slog.DiscardHandler))
	clearLeaseMarks(lease)
	if err := lease.Heartbeat(context.Background(), cloud); err != nil || len(cloud.put) != 1 {
		t.Fatalf("heartbeat %v, %d leases written", err, len(cloud.put))
	}
	if got := cloud.put[0]; len(got.Annotations) != 0 || !maps.Equal(got.Labels, map[string]string{"other": "kept"}) {
		t.Fatalf("outside lease mode the lease keeps labels %v, annotations %v; want the pool's marks gone", got.Labels, got.Annotations)
	}
}
