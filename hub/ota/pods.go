package ota

import (
	"log/slog"
	"net/http"

	"nodehub/wire"
)

// pods answers GET /pods: the pods of this node in kubelet's cache, as a JSON PodList, whether the
// cloud is reachable or not (YurtHub reads them from its cache too). Objects go out as the bytes
// the cache holds (protobuf ones converted to JSON). Memory is the node's pods, at most ~110.
func (h *Handler) pods(w http.ResponseWriter, r *http.Request) {
	b := &wire.ListBuilder{APIVersion: "v1", Kind: "Pod"}
	err := h.CachedPods(func(raw []byte) error {
		j, err := wire.Convert(raw, false)
		if err != nil {
			h.log().Debug("ota: /pods: cached pod skipped", "err", err)
			return nil
		}
		return b.Add(j)
	})
	var body []byte
	if err == nil {
		body, err = b.Bytes("")
	}
	if err != nil {
		h.log().Warn("ota: /pods: reading the cache failed", "err", err)
		writeAnswer(w, fail(http.StatusInternalServerError, "Get pod list failed: %v", err))
		return
	}
	h.log().Log(r.Context(), slog.LevelDebug, "ota: /pods", "bytes", len(body))
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}
