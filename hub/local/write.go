package local

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"nodehub/cache"
	"nodehub/wire"
)

const maxBody = 3 << 20

// create keeps an event offline (answered 201, never replayed to the cloud) and answers this
// node's registration (register.go); any other create would be a lost write, so it is refused.
func (p *Proxy) create(w http.ResponseWriter, r *http.Request, req *Request) {
	ri := req.Info
	if ri.Group == "" && ri.Resource == "nodes" && ri.Subresource == "" {
		p.createNode(w, r, req)
		return
	}
	if ri.Resource != "events" || ri.Subresource != "" || (ri.Group != "" && ri.Group != "events.k8s.io") {
		p.unavailable(w, req)
		return
	}
	if !req.Shared && !req.Vouched {
		// Offline a token's claims cannot be checked: one the cloud never accepted may be made
		// up, and every made-up one would be an owner with a quota of its own.
		p.status(w, req, http.StatusServiceUnavailable, "nodehub: the cloud is unreachable and never accepted this credential: create "+resourceName(ri)+" cannot be answered offline")
		return
	}
	body, err := readBody(r)
	if err != nil {
		p.answerError(w, req, err, http.StatusBadRequest)
		return
	}
	if !req.Info.ContentType.IsProtobuf() {
		body = []byte(strings.TrimSpace(string(body)))
	}
	obj, err := wire.Decode(body)
	if err != nil && !errors.Is(err, wire.ErrNotConvertible) {
		p.status(w, req, http.StatusBadRequest, err.Error())
		return
	}
	if obj != nil { // fill in what the apiserver would: a name from generateName, a uid, a time
		if body, err = fillObjectMeta(obj, ri.Namespace, req.Info.ContentType.IsProtobuf()); err != nil {
			p.status(w, req, http.StatusBadRequest, err.Error())
			return
		}
	}
	m, err := wire.ExtractMeta(body, ri.Resource)
	if err != nil || m.Name == "" {
		p.status(w, req, http.StatusBadRequest, "nodehub: an event needs a name")
		return
	}
	h := cache.Header{ContentType: ctOf(body), APIVersion: m.APIVersion, Kind: m.Kind, Namespace: m.Namespace, Name: m.Name,
		UID: m.UID, ResourceVersion: m.ResourceVersion, Labels: m.Labels, Fields: m.Fields, Local: true}
	k := cache.Key{Resource: resource(req.Owners[0], ri), Namespace: m.Namespace, Name: m.Name}
	if err := p.Store.Put(k, &h, body); err != nil {
		p.writeFailed(w, req, err)
		return
	}
	p.respondObject(w, req, http.StatusCreated, body)
}

// update applies an update or patch of the node's own Node, its Lease, or the status of a pod on
// this node (kubelet's alone: podstatus.go) to the cached copy, so the node's own view stays true
// offline. The copy is marked local: the cloud's version replaces it when the link returns. Other
// writes are refused.
func (p *Proxy) update(w http.ResponseWriter, r *http.Request, req *Request) {
	ri := req.Info
	if !p.mayChange(ri) {
		p.unavailable(w, req)
		return
	}
	if !p.mayReport(w, req) {
		return
	}
	it, owner, ok := p.lookupOrAnswer(w, changeable(req))
	if !ok {
		return
	}
	if ri.Resource == "pods" && it.Header.Fields["spec.nodeName"] != p.NodeName {
		p.unavailable(w, req)
		return
	}
	body, err := readBody(r)
	if err != nil {
		p.answerError(w, req, err, http.StatusBadRequest)
		return
	}
	result, err := changed(it, body, r.Header.Get("Content-Type"), ri)
	if err != nil {
		p.answerError(w, req, err, http.StatusUnprocessableEntity)
		return
	}
	m, err := wire.ExtractMeta(result, ri.Resource)
	if err != nil || m.Name != it.Header.Name || m.Namespace != it.Header.Namespace {
		p.status(w, req, http.StatusBadRequest, "nodehub: the change does not keep the object's name and namespace")
		return
	}
	h := cache.Header{ContentType: ctOf(result), APIVersion: m.APIVersion, Kind: m.Kind, Namespace: m.Namespace, Name: m.Name,
		UID: m.UID, ResourceVersion: m.ResourceVersion, Labels: m.Labels, Fields: m.Fields, Local: true}
	k := cache.Key{Resource: resource(owner, ri), Namespace: m.Namespace, Name: m.Name}
	if err := p.Store.Put(k, &h, result); err != nil {
		p.writeFailed(w, req, err)
		return
	}
	p.log().Debug("offline change kept locally", "resource", ri.Resource, "name", m.Name)
	p.appliedOffline()
	if p.Applied != nil {
		p.Applied(ri, result)
	}
	p.respondObject(w, req, http.StatusOK, result)
}

// changed is the cached copy it after an update or patch with body: 409 when it names another
// resourceVersion (precondition.go); an update keeps what the apiserver keeps (updatemeta.go); a
// status write changes the status alone (statusonly.go).
func changed(it cache.Item, body []byte, contentType string, ri *wire.RequestInfo) (result []byte, err error) {
	if ri.Verb == wire.VerbUpdate {
		result, err = wire.Convert(body, it.Header.ContentType == wire.MediaProtobuf)
	} else {
		result, err = applyPatch(it.Body, body, contentType)
	}
	if err == nil {
		err = conflict(result, ri, it.Header)
	}
	if err == nil && ri.Verb == wire.VerbUpdate && ri.Subresource == "" {
		result, err = keptOnUpdate(result, it.Header, it.Body)
	}
	if err == nil && ri.Subresource == "status" {
		result, err = statusOnly(it.Body, result, ri.Group == "" && ri.Resource == "nodes")
	}
	return result, err
}

// writeFailed answers an offline write the cache did not keep. Past a quota (cache.ErrFull) it is
// what the apiserver answers past a ResourceQuota: 403 Forbidden, "exceeded quota" — final, so
// client-go's event recorder drops the event instead of retrying (a 429 would be retried, and the
// quota does not free itself while offline); past the write budget of bytes a minute a 429
// (budget.go); any other failure is a 500.
func (p *Proxy) writeFailed(w http.ResponseWriter, req *Request, err error) {
	if p.pastBudget(w, req, err) {
		return
	}
	if errors.Is(err, cache.ErrFull) {
		p.status(w, req, http.StatusForbidden, "nodehub: exceeded quota of offline changes: "+err.Error())
		return
	}
	p.status(w, req, http.StatusInternalServerError, err.Error())
}

// AnswersWrite reports whether the offline proxy answers this write with more than a refusal:
// events, this node's registration, token requests, and the changes mayChange allows (a pod's
// status only to the node's kubelet).
func (p *Proxy) AnswersWrite(req *Request) bool {
	ri := req.Info
	if !ri.IsResource {
		return false
	}
	switch ri.Verb {
	case wire.VerbCreate:
		core := ri.Group == ""
		return core && ri.Resource == "nodes" && ri.Subresource == "" ||
			core && ri.Resource == "serviceaccounts" && ri.Subresource == "token" ||
			ri.Resource == "events" && ri.Subresource == "" && (core || ri.Group == "events.k8s.io")
	case wire.VerbUpdate, wire.VerbPatch:
		return p.mayChange(ri) && (!isPodStatus(ri) || req.Kubelet())
	}
	return false
}

// mayChange says which writes are applied offline: the node's own Node (and its status), its
// Lease, and pods' status (checked against the pod's node by the caller).
func (p *Proxy) mayChange(ri *wire.RequestInfo) bool {
	switch {
	case ri.Group == "" && ri.Resource == "nodes":
		return ri.Name == p.NodeName && (ri.Subresource == "" || ri.Subresource == "status")
	case ri.Group == "coordination.k8s.io" && ri.Resource == "leases":
		return ri.Namespace == "kube-node-lease" && ri.Name == p.NodeName && ri.Subresource == ""
	case ri.Group == "" && ri.Resource == "pods":
		return ri.Subresource == "status"
	}
	return false
}

func (p *Proxy) respondObject(w http.ResponseWriter, req *Request, code int, raw []byte) {
	f, _ := choose(req.Accept)
	body, pb, err := encodeItem(raw, format{protobuf: f.protobuf}, req.Accept)
	if err != nil {
		body, pb = raw, ctOf(raw) == wire.MediaProtobuf
	}
	writeBody(w, code, format{protobuf: pb}.contentType(false), body)
}

// readBody reads a request's body, at most maxBody: past it 400; a body that did not arrive by
// its deadline (the hub's body timeout) 408, as on every other route.
func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil, &statusError{http.StatusRequestTimeout, "nodehub: the request body was not received in time"}
	}
	if err != nil {
		return nil, &statusError{http.StatusBadRequest, "nodehub: read body: " + err.Error()}
	}
	if len(b) > maxBody {
		return nil, &statusError{http.StatusBadRequest, fmt.Sprintf("nodehub: body larger than %d bytes", maxBody)}
	}
	return b, nil
}

func ctOf(raw []byte) string {
	if len(raw) > 0 && raw[0] != '{' {
		return wire.MediaProtobuf
	}
	return wire.MediaJSON
}

// fillObjectMeta gives a new object what the apiserver would: a name from generateName, the
// request's namespace, a uid and a creation time.
func fillObjectMeta(obj wire.Typed, ns string, protobuf bool) ([]byte, error) {
	if m, ok := obj.(metav1.Object); ok {
		if m.GetName() == "" && m.GetGenerateName() != "" {
			var b [3]byte
			_, _ = rand.Read(b[:])
			m.SetName(m.GetGenerateName() + hex.EncodeToString(b[:])[:5])
		}
		if m.GetNamespace() == "" {
			m.SetNamespace(ns)
		}
		if m.GetUID() == "" {
			var b [16]byte
			_, _ = rand.Read(b[:])
			h := hex.EncodeToString(b[:])
			m.SetUID(types.UID(h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]))
		}
		if ts := m.GetCreationTimestamp(); ts.IsZero() {
			m.SetCreationTimestamp(metav1.NewTime(time.Now()))
		}
	}
	return wire.Encode(obj, protobuf)
}
