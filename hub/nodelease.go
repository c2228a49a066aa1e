package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/hub/remote"
	"nodehub/wire"
)

const (
	leaseNamespace  = "kube-node-lease"
	leaseGroup      = "coordination.k8s.io"
	leaseAPIVersion = "coordination.k8s.io/v1"
	maxLeaseBody    = 1 << 20
	defaultLeaseSec = 40
)

// NodeLease owns the node's Lease in kube-node-lease. Kubelet's lease requests are answered from
// its copy and never reach the cloud; the hub renews the lease in the cloud through each server as
// that server's heartbeat, so there is one writer and no conflicts. When kubelet has sent no lease
// request for GracePeriod the hub stops renewing (a dead kubelet still turns the node NotReady)
// and the heartbeat only reads the lease.
type NodeLease struct {
	NodeName    string
	GracePeriod time.Duration
	Log         *slog.Logger
	// Renewals counts cloud renewals by result (ok, conflict, error); may be nil.
	Renewals func(result string)
	// Labels and Annotations are put on the lease at every renewal (pool sharing's lease mode
	// marks the hub as a member of its pool this way).
	Labels, Annotations map[string]string

	now func() time.Time

	mu          sync.Mutex
	kubelet     *wire.Lease // what kubelet last sent: its spec is the truth
	kubeletSeen time.Time
	cloud       *wire.Lease // what the cloud last returned: its metadata is the truth
	lastCode    int
}

// NewNodeLease returns a NodeLease whose grace period starts now.
func NewNodeLease(node string, grace time.Duration, log *slog.Logger) *NodeLease {
	l := &NodeLease{NodeName: node, GracePeriod: grace, Log: log, now: time.Now}
	l.kubeletSeen = l.now()
	return l
}

// Owns reports whether a request addresses the node's own lease in a way the hub answers itself.
func (l *NodeLease) Owns(ri *wire.RequestInfo) bool {
	if !ri.IsResource || ri.Group != leaseGroup || ri.Resource != "leases" || ri.Namespace != leaseNamespace || ri.Subresource != "" {
		return false
	}
	switch ri.Verb {
	case wire.VerbGet, wire.VerbUpdate:
		return ri.Name == l.NodeName
	case wire.VerbCreate:
		return ri.Name == ""
	}
	return false
}

// ServeHTTP answers kubelet's get, create and update of the node lease from the hub's copy.
func (l *NodeLease) ServeHTTP(w http.ResponseWriter, r *http.Request, ri *wire.RequestInfo) {
	switch ri.Verb {
	case wire.VerbGet:
		l.mu.Lock()
		view := l.viewLocked()
		l.mu.Unlock()
		if view == nil {
			wire.WriteStatus(w, ri.Accept, http.StatusNotFound, fmt.Sprintf("leases.coordination.k8s.io %q not found", l.NodeName))
			return
		}
		writeLease(w, ri.Accept, http.StatusOK, view)
	case wire.VerbCreate, wire.VerbUpdate:
		lease, err := readLease(r, ri)
		if err != nil {
			wire.WriteStatus(w, ri.Accept, http.StatusBadRequest, err.Error())
			return
		}
		if lease.Name != l.NodeName {
			wire.WriteStatus(w, ri.Accept, http.StatusForbidden, fmt.Sprintf("node %q may only write lease %q", l.NodeName, l.NodeName))
			return
		}
		l.mu.Lock()
		l.kubelet, l.kubeletSeen = lease, l.now()
		view := l.viewLocked()
		l.mu.Unlock()
		code := http.StatusOK
		if ri.Verb == wire.VerbCreate {
			code = http.StatusCreated
		}
		writeLease(w, ri.Accept, code, view)
	}
}

// viewLocked is what kubelet is shown: the cloud's object with kubelet's spec.
func (l *NodeLease) viewLocked() *wire.Lease {
	switch {
	case l.cloud == nil && l.kubelet == nil:
		return nil
	case l.cloud == nil:
		v := l.kubelet.DeepCopy()
		if v.ResourceVersion == "" {
			v.ResourceVersion = "1"
		}
		return v
	}
	v := l.cloud.DeepCopy()
	if l.kubelet != nil {
		v.Spec = l.kubelet.Spec.DeepCopy()
		if len(v.OwnerReferences) == 0 {
			v.OwnerReferences = l.kubelet.OwnerReferences
		}
	}
	return v
}

// Heartbeat is the remote.Checker probe: it renews the lease through server b while kubelet is
// alive, and only reads it otherwise. Any answer from the server short of a 5xx counts as healthy.
func (l *NodeLease) Heartbeat(ctx context.Context, b *remote.Backend) error {
	l.mu.Lock()
	renew := l.now().Sub(l.kubeletSeen) <= l.GracePeriod
	base := l.viewLocked()
	l.mu.Unlock()

	if !renew || base == nil || base.UID == "" {
		code, cur, err := l.do(ctx, b, http.MethodGet, l.NodeName, nil)
		if err != nil {
			return err
		}
		if !renew {
			return l.settle(code)
		}
		switch {
		case code == http.StatusNotFound:
			return l.create(ctx, b)
		case cur == nil:
			return l.settle(code)
		}
		l.mu.Lock()
		base = l.viewLocked()
		l.mu.Unlock()
	}
	return l.renew(ctx, b, base, true)
}

func (l *NodeLease) renew(ctx context.Context, b *remote.Backend, base *wire.Lease, retry bool) error {
	l.stamp(base)
	code, _, err := l.do(ctx, b, http.MethodPut, l.NodeName, base)
	if err != nil {
		l.count("error")
		return err
	}
	if code == http.StatusConflict && retry {
		l.count("conflict")
		code, cur, err := l.do(ctx, b, http.MethodGet, l.NodeName, nil)
		if err != nil || cur == nil {
			return firstErr(err, l.settle(code))
		}
		l.mu.Lock()
		base = l.viewLocked()
		l.mu.Unlock()
		return l.renew(ctx, b, base, false)
	}
	if code == http.StatusOK {
		l.count("ok")
	}
	return l.settle(code)
}

func (l *NodeLease) create(ctx context.Context, b *remote.Backend) error {
	l.mu.Lock()
	lease := l.viewLocked()
	l.mu.Unlock()
	if lease == nil {
		lease = &wire.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.NodeName}}
		sec := int32(defaultLeaseSec)
		holder := l.NodeName
		lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds = &holder, &sec
	}
	lease.Namespace, lease.ResourceVersion, lease.UID = leaseNamespace, "", ""
	l.stamp(lease)
	code, _, err := l.do(ctx, b, http.MethodPost, "", lease)
	if err != nil {
		return err
	}
	if code == http.StatusCreated {
		l.count("ok")
	}
	return l.settle(code)
}

func (l *NodeLease) stamp(lease *wire.Lease) {
	now := metav1.NewMicroTime(l.now())
	lease.Spec.RenewTime = &now
	if lease.Spec.HolderIdentity == nil {
		h := l.NodeName
		lease.Spec.HolderIdentity = &h
	}
	lease.Labels = merged(lease.Labels, l.Labels)
	lease.Annotations = merged(lease.Annotations, l.Annotations)
}

// merged returns a copy of m with add's entries set (m itself when add is empty: m may be shared).
func merged(m, add map[string]string) map[string]string {
	if len(add) == 0 {
		return m
	}
	out := make(map[string]string, len(m)+len(add))
	maps.Copy(out, m)
	maps.Copy(out, add)
	return out
}

func (l *NodeLease) count(result string) {
	if l.Renewals != nil {
		l.Renewals(result)
	}
}

// settle turns a status code into the heartbeat's verdict, logging a change of code once.
func (l *NodeLease) settle(code int) error {
	l.mu.Lock()
	changed := code != l.lastCode
	l.lastCode = code
	l.mu.Unlock()
	if code >= 500 {
		return fmt.Errorf("node lease: server answered %d", code)
	}
	if changed && code >= 400 && code != http.StatusNotFound && code != http.StatusConflict {
		l.Log.Warn("node lease: cloud refused the hub's request", "code", code)
	}
	return nil
}

// do sends one JSON request for the lease through b with the node's identity and, on 2xx, records
// the cloud's object.
func (l *NodeLease) do(ctx context.Context, b *remote.Backend, method, name string, body *wire.Lease) (int, *wire.Lease, error) {
	path := "/apis/coordination.k8s.io/v1/namespaces/" + leaseNamespace + "/leases"
	if name != "" {
		path += "/" + name
	}
	var rd io.Reader
	if body != nil {
		body.APIVersion, body.Kind = leaseAPIVersion, "Lease"
		data, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, path, rd) // the backend fills in its server
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Accept", wire.MediaJSON)
	req.Header.Set("User-Agent", "nodehub")
	if body != nil {
		req.Header.Set("Content-Type", wire.MediaJSON)
	}
	resp, err := b.RoundTrip(remote.Route{Identity: remote.Node}, req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxLeaseBody))
	if err != nil {
		return 0, nil, err
	}
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, nil, nil
	}
	var cur wire.Lease
	if err := json.Unmarshal(data, &cur); err != nil {
		return resp.StatusCode, nil, fmt.Errorf("node lease: decode: %w", err)
	}
	l.mu.Lock()
	if l.cloud == nil || newerRV(cur.ResourceVersion, l.cloud.ResourceVersion) {
		l.cloud = &cur
	}
	l.mu.Unlock()
	return resp.StatusCode, &cur, nil
}

// newerRV compares resourceVersions numerically when both are numbers (etcd's are), else treats
// the new one as newer.
func newerRV(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	if err1 != nil || err2 != nil {
		return true
	}
	return x >= y
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func readLease(r *http.Request, ri *wire.RequestInfo) (*wire.Lease, error) {
	data, err := io.ReadAll(io.LimitReader(r.Body, maxLeaseBody+1))
	if err != nil {
		return nil, fmt.Errorf("read lease: %w", err)
	}
	if len(data) > maxLeaseBody {
		return nil, fmt.Errorf("lease body larger than %d bytes", maxLeaseBody)
	}
	lease := &wire.Lease{}
	if ri.ContentType.IsProtobuf() {
		if _, _, err := wire.DecodeProto(data, lease); err != nil {
			return nil, err
		}
	} else if err := json.Unmarshal(data, lease); err != nil {
		return nil, fmt.Errorf("decode lease: %w", err)
	}
	if lease.Namespace == "" {
		lease.Namespace = leaseNamespace
	}
	return lease, nil
}

func writeLease(w http.ResponseWriter, accept wire.MediaType, code int, lease *wire.Lease) {
	lease.APIVersion, lease.Kind = leaseAPIVersion, "Lease"
	var (
		data []byte
		err  error
		ct   = wire.MediaJSON
	)
	if accept.IsProtobuf() {
		data, err = wire.EncodeProto(leaseAPIVersion, "Lease", lease)
		ct = wire.MediaProtobuf
	} else {
		data, err = json.Marshal(lease)
	}
	if err != nil {
		wire.WriteStatus(w, accept, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(code)
	_, _ = w.Write(data)
}
