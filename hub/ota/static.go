package ota

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"nodehub/durable"
)

// upgradeStatic is YurtHub's static pod upgrade: the YurtStaticSet's manifest is the one data
// entry of ConfigMap yurt-static-set-<static name> in the pod's namespace; it replaces
// <StaticPodPath>/<entry>.yaml and kubelet restarts the pod from it. The old manifest is kept as
// .<entry>.yaml.bak beside it (kubelet ignores dot files).
func (h *Handler) upgradeStatic(ctx context.Context, p *pod) (answer, bool) {
	static := staticName(p.Metadata.Name, h.NodeName)
	if static == "" {
		return fail(http.StatusInternalServerError, "Static pod pre-check failed, pod name doesn't meet static pod's format"), false
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	err := h.call(ctx, http.MethodGet, "/api/v1/namespaces/"+p.Metadata.Namespace+"/configmaps/"+StaticSetConfigMapPrefix+static, "", nil, &cm)
	if isNotFound(err) {
		return fail(http.StatusForbidden, "Configmap for static pod does not exist"), false
	}
	if err != nil {
		return fail(http.StatusInternalServerError, "Static pod pre-check failed, %v", err), false
	}
	var manifest, data string
	for k, v := range cm.Data {
		manifest, data = k, v
	}
	if len(cm.Data) != 1 || data == "" {
		return fail(http.StatusInternalServerError, "Apply update failed, configmap %s%s must hold one non-empty manifest", StaticSetConfigMapPrefix, static), false
	}
	if strings.ContainsAny(manifest, `/\`) || strings.HasPrefix(manifest, ".") {
		return fail(http.StatusInternalServerError, "Apply update failed, %q is not a manifest file name", manifest), false
	}
	if err := writeManifest(h.StaticPodPath, manifest+".yaml", []byte(data)); err != nil {
		return fail(http.StatusInternalServerError, "Apply update failed, %v", err), false
	}
	return answer{}, true
}

// writeManifest replaces dir/name atomically, in one durable batch: the old file is kept as
// .name.bak and the new one replaces name (each a hidden temporary file, synced, then renamed, and
// dir synced once). After a crash, kubelet sees the old manifest or the new one, never a torn one
// (it ignores dot files, so neither a temporary file nor the backup is ever read as a pod).
func writeManifest(dir, name string, data []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	target := filepath.Join(dir, name)
	b, err := durable.NewBatch(dir)
	if err != nil {
		return fmt.Errorf("write %s: %w", target, err)
	}
	if old, err := os.ReadFile(target); err == nil {
		if err := b.Write("."+name+".bak", old, 0o600); err != nil {
			b.Abort()
			return fmt.Errorf("back up %s: %w", target, err)
		}
	}
	if err := b.Write(name, data, 0o600); err != nil {
		b.Abort()
		return fmt.Errorf("write %s: %w", target, err)
	}
	if err := b.Commit(); err != nil {
		return fmt.Errorf("write %s: %w", target, err)
	}
	return nil
}

func nowRFC3339() string { return time.Now().UTC().Format(time.RFC3339) }
