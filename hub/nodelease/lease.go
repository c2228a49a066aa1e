// Package nodelease owns the node's Lease in kube-node-lease: kubelet's get, create and update of
// it are answered from the hub's copy and never reach the cloud, and the hub renews it in the
// cloud as each server's heartbeat (Heartbeat), so the lease has one writer and no conflicts.
//
// lease.go is the hub's copy and kubelet's view of it; heartbeat.go the renewal in the cloud;
// codec.go a Lease on the wire.
package nodelease

import (
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"nodehub/wire"
)

const (
	// Namespace holds the node leases.
	Namespace       = "kube-node-lease"
	group           = "coordination.k8s.io"
	apiVersion      = "coordination.k8s.io/v1"
	maxBody         = 1 << 20
	defaultLeaseSec = 40
)

// Lease is the hub's copy of the node's lease. When kubelet has sent no lease request for
// GracePeriod the hub stops renewing (a dead kubelet still turns the node NotReady) and the
// heartbeat only reads the lease.
type Lease struct {
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
	// fieldsReset: a renewal since the last full write reset the lease's managed fields.
	fieldsReset bool
	// marks are labels the hub sets and removes while it runs (SetLabel): value "" removes;
	// annMarks the same for annotations (SetAnnotation).
	marks, annMarks map[string]string
}

// SetLabel puts label key=value on the lease from the next renewal on, or removes it when value
// is "" (pool sharing's leader mark).
func (l *Lease) SetLabel(key, value string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.marks == nil {
		l.marks = map[string]string{}
	}
	l.marks[key] = value
}

// SetAnnotation puts annotation key=value on the lease from the next renewal on, or removes it
// when value is "" (pool sharing's address, while the hub can serve the pool).
func (l *Lease) SetAnnotation(key, value string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.annMarks == nil {
		l.annMarks = map[string]string{}
	}
	l.annMarks[key] = value
}

// New returns the lease of node, whose grace period starts now.
func New(node string, grace time.Duration, log *slog.Logger) *Lease {
	l := &Lease{NodeName: node, GracePeriod: grace, Log: log, now: time.Now}
	l.kubeletSeen = l.now()
	return l
}

// Owns reports whether a request addresses the node's own lease in a way the hub answers itself.
func (l *Lease) Owns(ri *wire.RequestInfo) bool {
	if !ri.IsResource || ri.Group != group || ri.Resource != "leases" || ri.Namespace != Namespace || ri.Subresource != "" {
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

// ServeHTTP answers kubelet's get, create and update of the node lease (a request Owns) from the
// hub's copy.
func (l *Lease) ServeHTTP(w http.ResponseWriter, r *http.Request, ri *wire.RequestInfo) {
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
		if ri.ContentType.IsCBOR() {
			// 415, not 400: client-go preferring CBOR sends JSON from then on.
			wire.WriteStatus(w, ri.Accept, http.StatusUnsupportedMediaType, "nodehub: the node's lease is kept in JSON or protobuf: send one of them, not CBOR")
			return
		}
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
func (l *Lease) viewLocked() *wire.Lease {
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

// view is viewLocked under the lock.
func (l *Lease) view() *wire.Lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.viewLocked()
}
