package ota

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// upgrade is YurtHub's UpdatePod: the pod (read from the cloud) must be on this node, not being
// deleted, PodNeedUpgrade True and, when an image pre-pull was asked for, its image ready (403
// otherwise). A DaemonSet pod is deleted in the cloud so its DaemonSet (OnDelete strategy)
// recreates it from the new template; a static pod (owned by the Node) gets the manifest of its
// YurtStaticSet written into kubelet's manifest directory. Other owners: 400.
func (h *Handler) upgrade(ctx context.Context, ns, name string) answer {
	p, err := h.getPod(ctx, ns, name)
	if err != nil {
		return getPodFailed(err)
	}
	if err := p.checkStatus(h.NodeName); err != nil {
		return fail(http.StatusForbidden, "Pre check update pod failed, %v", err)
	}
	if err := p.checkImageReady(); err != nil {
		return fail(http.StatusForbidden, "Pre check update pod failed, %v", err)
	}
	kind := ""
	if len(p.Metadata.OwnerReferences) > 0 {
		kind = p.Metadata.OwnerReferences[0].Kind
	}
	switch kind {
	case "DaemonSet":
		if err := h.deletePod(ctx, p); err != nil {
			return fail(http.StatusInternalServerError, "Apply update failed, %v", err)
		}
	case "Node":
		if a, ok := h.upgradeStatic(ctx, p); !ok {
			return a
		}
	default:
		return fail(http.StatusBadRequest, "Not support ota upgrade pod type %v", kind)
	}
	return answer{http.StatusOK, fmt.Sprintf("Start updating pod %v/%v", ns, name)}
}

// deletePod deletes the pod in the cloud, only the very pod that was checked (uid precondition).
func (h *Handler) deletePod(ctx context.Context, p *pod) error {
	body, _ := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "DeleteOptions",
		"preconditions": map[string]string{"uid": p.Metadata.UID},
	})
	return h.call(ctx, http.MethodDelete, "/api/v1/namespaces/"+p.Metadata.Namespace+"/pods/"+p.Metadata.Name, "application/json", body, nil)
}

// imagePull is YurtHub's ImagePullPod: after the same status check as upgrade (403), the pod's
// PodImageReady condition becomes False with the revision PodNeedUpgrade names, which tells
// yurt-manager to pre-pull that revision's images on this node. The patch is a strategic merge
// patch of the status (conditions merge by type), recorded with field manager "nodehub".
func (h *Handler) imagePull(ctx context.Context, ns, name string) answer {
	p, err := h.getPod(ctx, ns, name)
	if err != nil {
		return getPodFailed(err)
	}
	if err := p.checkStatus(h.NodeName); err != nil {
		return fail(http.StatusForbidden, "Failed to check pod status %v/%v, error: %v", ns, name, err)
	}
	cond := map[string]any{
		"type": CondImageReady, "status": "False", "message": VersionPrefix + p.nextRevision(),
		"reason": nil, // YurtHub's condition has none: a previous failure's reason goes
	}
	if old := p.condition(CondImageReady); old == nil || old.Status != "False" {
		cond["lastTransitionTime"] = nowRFC3339()
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{cond}}})
	path := "/api/v1/namespaces/" + ns + "/pods/" + name + "/status?fieldManager=" + FieldManager
	if err := h.call(ctx, http.MethodPatch, path, "application/strategic-merge-patch+json", patch, nil); err != nil {
		return fail(http.StatusInternalServerError, "Patch pod status for imagepull failed, %v", err)
	}
	return answer{http.StatusOK, fmt.Sprintf("Image pre-pull requested for pod %v/%v", ns, name)}
}

// staticName is the static pod's name without the "-<node>" suffix kubelet adds, or "".
func staticName(podName, node string) string {
	base, ok := strings.CutSuffix(podName, "-"+node)
	if !ok || base == "" {
		return ""
	}
	return base
}
