// Package ota serves YurtHub's hub API that operators' tools on the node use, on the hub's own
// port (--bind-address:--serve-port, loopback by default), with YurtHub's paths and codes:
//
//	GET  /pods                                              this node's pods as kubelet cached them (PodList JSON), online or offline
//	POST /openyurt.io/v1/namespaces/{ns}/pods/{pod}/upgrade   OTA upgrade of a DaemonSet pod or a static pod
//	POST /openyurt.io/v1/namespaces/{ns}/pods/{pod}/imagepull ask yurt-manager to pre-pull the new image (PodImageReady)
//
// Upgrade and imagepull act in the cloud with the node's identity, only for pods bound to this
// node, and only while a cloud server is healthy (503 otherwise). Every answer of the two POSTs is
// a Kubernetes Status in JSON: `status` Success or Failure, `code` the HTTP code, `message`
// YurtHub's text. Each action is logged once.
package ota

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"nodehub/wire"
)

// Names YurtHub and yurt-manager use.
const (
	// CondNeedUpgrade is set True by yurt-manager on a pod of an OTA DaemonSet whose template changed;
	// its message is "controllerrevision: <hash of the new template>".
	CondNeedUpgrade = "PodNeedUpgrade"
	// CondImageReady is set by the imagepull request (False, the wanted revision) and by yurt-manager
	// once the image is on the node (True).
	CondImageReady = "PodImageReady"
	// VersionPrefix starts the message of both conditions.
	VersionPrefix = "controllerrevision: "
	// StaticSetConfigMapPrefix names the ConfigMap that holds a YurtStaticSet's manifest.
	StaticSetConfigMapPrefix = "yurt-static-set-"
	// FieldManager is who the imagepull patch is recorded as.
	FieldManager = "nodehub"
)

// Handler serves the API. Every field but Log must be set.
type Handler struct {
	// NodeName is this node: only its pods are acted on.
	NodeName string
	// Cloud sends a request to a healthy cloud kube-apiserver with the node's identity; the
	// request's URL is only a path and query.
	Cloud http.RoundTripper
	// Online reports whether a cloud server is healthy.
	Online func() bool
	// FromNode reports whether a request is the node's own (over loopback): the hub decides it,
	// in one place (hub/origin.go); the actions lend the node's identity to nothing else.
	FromNode func(r *http.Request) bool
	// CachedPods calls fn with each pod of this node kubelet's cache holds, as JSON.
	CachedPods func(fn func(pod []byte) error) error
	// StaticPodPath is kubelet's manifest directory, where a static pod's new manifest is written.
	StaticPodPath string
	// Timeout bounds one cloud request (default 10 s).
	Timeout time.Duration
	Log     *slog.Logger
	// OnAction, when set, counts each answered action (action: upgrade or imagepull, code).
	OnAction func(action string, code int)
}

// Register adds the endpoints to mux.
func (h *Handler) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /pods", h.pods)
	mux.HandleFunc("POST /openyurt.io/v1/namespaces/{ns}/pods/{pod}/upgrade", h.action("upgrade", h.upgrade))
	mux.HandleFunc("POST /openyurt.io/v1/namespaces/{ns}/pods/{pod}/imagepull", h.action("imagepull", h.imagePull))
}

func (h *Handler) log() *slog.Logger {
	if h.Log == nil {
		return slog.Default()
	}
	return h.Log
}

// answer is one action's outcome: YurtHub's code and message.
type answer struct {
	code int
	msg  string
}

func fail(code int, format string, args ...any) answer {
	return answer{code, fmt.Sprintf(format, args...)}
}

// action wraps upgrade and imagepull: name checks, the cloud check, the answer and the log line.
func (h *Handler) action(name string, do func(ctx context.Context, ns, pod string) answer) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ns, pod := r.PathValue("ns"), r.PathValue("pod")
		var a answer
		switch {
		case !h.FromNode(r):
			a = fail(http.StatusForbidden, "OTA actions act with the node's identity: only clients on the node itself (loopback) may ask")
		case !isDNSName(ns) || !isDNSName(pod):
			a = fail(http.StatusBadRequest, "%q/%q is not a namespace and pod name", ns, pod)
		case !h.Online():
			a = fail(http.StatusServiceUnavailable, "OTA upgrade is not allowed when node is disconnected to cloud")
		default:
			t := h.Timeout
			if t <= 0 {
				t = 10 * time.Second
			}
			ctx, cancel := context.WithTimeout(r.Context(), t)
			a = do(ctx, ns, pod)
			cancel()
		}
		lvl := slog.LevelInfo
		if a.code >= 500 {
			lvl = slog.LevelWarn
		}
		h.log().Log(r.Context(), lvl, "ota: "+name, "pod", ns+"/"+pod, "code", a.code, "message", a.msg)
		if h.OnAction != nil {
			h.OnAction(name, a.code)
		}
		writeAnswer(w, a)
	}
}

// writeAnswer writes a Status: Success for 200, else Failure with the Status reason for the code.
func writeAnswer(w http.ResponseWriter, a answer) {
	st := wire.NewStatus(a.code, a.msg)
	if a.code == http.StatusOK {
		st.Status, st.Reason = "Success", ""
	}
	body, ct := wire.EncodeStatus(st, false)
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(a.code)
	_, _ = w.Write(append(body, '\n'))
}

// pod is the part of a Pod the checks read.
type pod struct {
	Metadata struct {
		Name              string  `json:"name"`
		Namespace         string  `json:"namespace"`
		UID               string  `json:"uid"`
		DeletionTimestamp *string `json:"deletionTimestamp"`
		OwnerReferences   []struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		} `json:"ownerReferences"`
	} `json:"metadata"`
	Spec struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
	Status struct {
		Conditions []condition `json:"conditions"`
	} `json:"status"`
}

type condition struct {
	Type               string `json:"type"`
	Status             string `json:"status"`
	Reason             string `json:"reason,omitempty"`
	Message            string `json:"message,omitempty"`
	LastTransitionTime string `json:"lastTransitionTime,omitempty"`
}

func (p *pod) condition(typ string) *condition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// nextRevision is the revision PodNeedUpgrade names ("" when none).
func (p *pod) nextRevision() string {
	if c := p.condition(CondNeedUpgrade); c != nil {
		return strings.TrimPrefix(c.Message, VersionPrefix)
	}
	return ""
}

// checkStatus is YurtHub's check before both actions: not being deleted, on this node, and
// PodNeedUpgrade True.
func (p *pod) checkStatus(node string) error {
	id := p.Metadata.Namespace + "/" + p.Metadata.Name
	if p.Metadata.DeletionTimestamp != nil {
		return fmt.Errorf("Pod %s is deleting, can not be updated", id)
	}
	if p.Spec.NodeName != node {
		return fmt.Errorf("Pod: %s is running on %q, not on this node %q, can not be updated", id, p.Spec.NodeName, node)
	}
	if c := p.condition(CondNeedUpgrade); c == nil || c.Status != "True" {
		return fmt.Errorf("Pod: %s update status is False, can not be updated", id)
	}
	return nil
}

// checkImageReady: when an image pre-pull was asked for, the upgrade waits until it is done for
// the revision the pod is to be upgraded to.
func (p *pod) checkImageReady() error {
	c := p.condition(CondImageReady)
	if c == nil {
		return nil
	}
	if c.Status != "True" || strings.TrimPrefix(c.Message, VersionPrefix) != p.nextRevision() {
		return fmt.Errorf("Pod: %s/%s image is not ready, reason: %s, message: %s", p.Metadata.Namespace, p.Metadata.Name, c.Reason, c.Message)
	}
	return nil
}

// errStatus is a non-2xx answer of the cloud.
type errStatus struct {
	code int
	msg  string
}

func (e *errStatus) Error() string { return e.msg }

// isNotFound reports whether the cloud answered 404.
func isNotFound(err error) bool { return cloudCode(err) == http.StatusNotFound }

// cloudCode is the HTTP code of the cloud's answer in err (0 when it did not answer).
func cloudCode(err error) int {
	var se *errStatus
	if errors.As(err, &se) {
		return se.code
	}
	return 0
}

// getPodFailed answers a failed read of the pod as YurtHub does (500), except a 403 of the cloud:
// with the node's identity that means the pod is not bound to this node, YurtHub's 403 case.
func getPodFailed(err error) answer {
	if cloudCode(err) == http.StatusForbidden {
		return fail(http.StatusForbidden, "Pre check update pod failed, the pod is not on this node: %v", err)
	}
	return fail(http.StatusInternalServerError, "Get pod failed, %v", err)
}

// call sends one request to the cloud and decodes a JSON answer into out (when not nil).
func (h *Handler) call(ctx context.Context, method, path, contentType string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "nodehub/ota")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := h.Cloud.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		msg := strings.TrimSpace(string(data))
		var st struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(data, &st) == nil && st.Message != "" {
			msg = st.Message
		}
		return &errStatus{resp.StatusCode, fmt.Sprintf("%d %s", resp.StatusCode, msg)}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

func (h *Handler) getPod(ctx context.Context, ns, name string) (*pod, error) {
	p := &pod{}
	if err := h.call(ctx, http.MethodGet, "/api/v1/namespaces/"+ns+"/pods/"+name, "", nil, p); err != nil {
		return nil, err
	}
	return p, nil
}

// isDNSName accepts what Kubernetes accepts as a namespace or pod name (and nothing that could
// change the cloud request's path).
func isDNSName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return s != "." && s != ".."
}
