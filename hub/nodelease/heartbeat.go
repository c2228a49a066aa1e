package nodelease

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/wire"
)

// Heartbeat renews the lease in the cloud through rt while kubelet is alive, and only reads it
// otherwise. rt sends a request whose URL is a path only to one server with the node's identity
// (the hub's remote.Backend). Any answer short of a 5xx means the server is alive (nil error).
func (l *Lease) Heartbeat(ctx context.Context, rt http.RoundTripper) error {
	l.mu.Lock()
	renew := l.now().Sub(l.kubeletSeen) <= l.GracePeriod
	base := l.viewLocked()
	l.mu.Unlock()

	if !renew || base == nil || base.UID == "" {
		code, cur, err := l.do(ctx, rt, http.MethodGet, l.NodeName, nil)
		if err != nil {
			return err
		}
		if !renew {
			return l.settle(code)
		}
		switch {
		case code == http.StatusNotFound:
			return l.create(ctx, rt)
		case cur == nil:
			return l.settle(code)
		}
		base = l.view()
	}
	return l.renew(ctx, rt, base, true)
}

// renew writes the renewal: in its smallest form, a merge patch of the renew time alone (about
// 50 bytes instead of the whole lease), when that is all that differs from the cloud's copy (as
// at almost every renewal); else the whole lease (kubelet changed its spec, or the hub's marks
// are missing), conditional on the cloud's resourceVersion.
func (l *Lease) renew(ctx context.Context, rt http.RoundTripper, base *wire.Lease, retry bool) error {
	l.stamp(base)
	if patch, reset := l.renewPatch(base); patch != nil {
		code, _, err := l.do(ctx, rt, http.MethodPatch, l.NodeName, patch)
		if err != nil {
			l.count("error")
			return err
		}
		if code == http.StatusOK {
			l.count("ok")
			if reset {
				l.mu.Lock()
				l.fieldsReset = true
				l.mu.Unlock()
			}
		}
		l.forgetIfGone(code)
		return l.settle(code)
	}
	l.fieldsWritten()
	code, _, err := l.do(ctx, rt, http.MethodPut, l.NodeName, base)
	if err != nil {
		l.count("error")
		return err
	}
	if code == http.StatusConflict && retry {
		l.count("conflict")
		code, cur, err := l.do(ctx, rt, http.MethodGet, l.NodeName, nil)
		if err != nil || cur == nil {
			return cmp.Or(err, l.settle(code))
		}
		return l.renew(ctx, rt, l.view(), false)
	}
	if code == http.StatusOK {
		l.count("ok")
	}
	l.forgetIfGone(code)
	return l.settle(code)
}

// forgetIfGone drops the cloud's copy after a 404: the lease was deleted, the next heartbeat
// creates it again.
func (l *Lease) forgetIfGone(code int) {
	if code != http.StatusNotFound {
		return
	}
	l.mu.Lock()
	l.cloud = nil
	l.mu.Unlock()
}

// renewPatch is the merge patch that turns the cloud's copy into lease when only the renew time
// differs, else nil; reset says it also resets the lease's managed fields (see renewedOnly).
func (l *Lease) renewPatch(lease *wire.Lease) (patch []byte, reset bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.cloud
	if c == nil || c.UID == "" || lease.Spec.RenewTime == nil || c.Spec.RenewTime == nil ||
		!maps.Equal(c.Labels, lease.Labels) || !maps.Equal(c.Annotations, lease.Annotations) ||
		len(c.OwnerReferences) != len(lease.OwnerReferences) {
		return nil, false
	}
	if !sameButRenewal(lease.Spec, c.Spec) {
		return nil, false
	}
	meta := ""
	if reset = !l.fieldsReset && !renewedOnly(c.ManagedFields); reset {
		meta = `"metadata":{"managedFields":[{}]},`
	}
	return []byte(`{` + meta + `"spec":{"renewTime":"` + lease.Spec.RenewTime.UTC().Format("2006-01-02T15:04:05.000000Z07:00") + `"}}`), reset
}

// renewOnlyFields is what the managed fields of a lease hold once renewals are its only writes:
// the renew time.
const renewOnlyFields = `{"f:spec":{"f:renewTime":{}}}`

// renewedOnly says whether the lease's managed fields are already as small as renewals keep them
// (or not tracked at all). The apiserver answers every renewal with the whole lease, managed
// fields and all: the hub's creation of it (holder, duration, pool marks) and any earlier
// writer's entry come back 8,640 times a day. The hub is the lease's only writer (kubelet's
// requests for it are answered from the hub's copy), so once after each full write it resets them
// with the renewal (a list of one empty entry: Kubernetes' documented reset); the apiserver then
// keeps none (measured on v1.34: it starts no record for an object that has none), or at most the
// renew time's. ~100 bytes less per heartbeat, ~250 with the pool's marks.
func renewedOnly(mf []metav1.ManagedFieldsEntry) bool {
	return len(mf) == 0 || len(mf) == 1 && mf[0].FieldsV1 != nil && string(mf[0].FieldsV1.Raw) == renewOnlyFields
}

// fieldsWritten notes a full write of the lease: its fields are managed again, and the next
// renewal may reset them.
func (l *Lease) fieldsWritten() {
	l.mu.Lock()
	l.fieldsReset = false
	l.mu.Unlock()
}

func (l *Lease) create(ctx context.Context, rt http.RoundTripper) error {
	lease := l.view()
	if lease == nil {
		lease = &wire.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.NodeName}}
		sec := int32(defaultLeaseSec)
		holder := l.NodeName
		lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds = &holder, &sec
	}
	lease.Namespace, lease.ResourceVersion, lease.UID = Namespace, "", ""
	l.stamp(lease)
	l.fieldsWritten()
	code, _, err := l.do(ctx, rt, http.MethodPost, "", lease)
	if err != nil {
		return err
	}
	if code == http.StatusCreated {
		l.count("ok")
	}
	return l.settle(code)
}

// stamp sets the renew time, a holder if none, and the hub's labels and annotations.
func (l *Lease) stamp(lease *wire.Lease) {
	now := metav1.NewMicroTime(l.now())
	lease.Spec.RenewTime = &now
	if lease.Spec.HolderIdentity == nil {
		h := l.NodeName
		lease.Spec.HolderIdentity = &h
	}
	lease.Labels = merged(lease.Labels, l.Labels)
	lease.Annotations = merged(lease.Annotations, l.Annotations)
	l.mu.Lock()
	lease.Labels = marked(lease.Labels, l.marks)
	lease.Annotations = marked(lease.Annotations, l.annMarks)
	l.mu.Unlock()
}

// marked returns m with marks applied (value "": removed), copied only when one changes it.
func marked(m, marks map[string]string) map[string]string {
	for k, v := range marks {
		if cur, there := m[k]; v == "" && !there || v != "" && cur == v {
			continue
		}
		out := make(map[string]string, len(m)+1)
		maps.Copy(out, m)
		if v == "" {
			delete(out, k)
		} else {
			out[k] = v
		}
		m = out
	}
	return m
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

func (l *Lease) count(result string) {
	if l.Renewals != nil {
		l.Renewals(result)
	}
}

// settle turns a status code into the heartbeat's verdict, logging a change of code once.
func (l *Lease) settle(code int) error {
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

// do sends one request for the lease through rt — body a lease in protobuf, or for PATCH a merge
// patch — and, on 2xx, records the cloud's object.
func (l *Lease) do(ctx context.Context, rt http.RoundTripper, method, name string, body any) (int, *wire.Lease, error) {
	req, err := leaseRequest(ctx, method, name, body)
	if err != nil {
		return 0, nil, err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return 0, nil, err
	}
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, nil, nil
	}
	var cur wire.Lease
	if wire.IsProtobuf(data) {
		cur.APIVersion, cur.Kind, err = wire.DecodeProto(data, &cur)
	} else {
		err = json.Unmarshal(data, &cur)
	}
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("node lease: decode: %w", err)
	}
	l.mu.Lock()
	if l.cloud == nil || newerRV(cur.ResourceVersion, l.cloud.ResourceVersion) {
		l.cloud = &cur
	}
	l.mu.Unlock()
	return resp.StatusCode, &cur, nil
}

// leaseRequest is the request for lease name ("" for the collection) with body: a lease
// (protobuf; a nil one is no body) or a merge patch.
func leaseRequest(ctx context.Context, method, name string, body any) (*http.Request, error) {
	path := "/apis/" + apiVersion + "/namespaces/" + Namespace + "/leases"
	if name != "" {
		path += "/" + name
	}
	var rd io.Reader
	ctype := wire.MediaProtobuf
	switch b := body.(type) {
	case *wire.Lease:
		if b == nil {
			break
		}
		b.APIVersion, b.Kind = apiVersion, "Lease"
		data, err := wire.EncodeProto(apiVersion, "Lease", b)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(data)
	case []byte:
		rd, ctype = bytes.NewReader(b), "application/merge-patch+json"
	}
	req, err := http.NewRequestWithContext(ctx, method, path, rd) // rt fills in its server
	if err != nil {
		return nil, err
	}
	// Protobuf both ways (JSON still read from a server that answers it): the lease's own codec
	// and ObjectMeta's generated one, where encoding/json would walk ObjectMeta by reflection —
	// measured on an idle hub, that walk and the stack growth it causes were most of the binary's
	// pages a heartbeat faults back in.
	req.Header.Set("Accept", wire.MediaProtobuf+", "+wire.MediaJSON)
	req.Header.Set("User-Agent", "nodehub")
	if rd != nil {
		req.Header.Set("Content-Type", ctype)
	}
	return req, nil
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

// sameButRenewal reports whether two lease specs agree in everything but the renew time.
func sameButRenewal(a, b wire.LeaseSpec) bool {
	str := func(x, y *string) bool { return x == nil && y == nil || x != nil && y != nil && *x == *y }
	i32 := func(x, y *int32) bool { return x == nil && y == nil || x != nil && y != nil && *x == *y }
	at := func(x, y *metav1.MicroTime) bool { return x == nil && y == nil || x != nil && y != nil && x.Equal(y) }
	return str(a.HolderIdentity, b.HolderIdentity) && i32(a.LeaseDurationSeconds, b.LeaseDurationSeconds) &&
		at(a.AcquireTime, b.AcquireTime) && i32(a.LeaseTransitions, b.LeaseTransitions) &&
		str(a.Strategy, b.Strategy) && str(a.PreferredHolder, b.PreferredHolder)
}
