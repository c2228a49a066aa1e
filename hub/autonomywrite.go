package hub

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	corev1 "k8s.io/api/core/v1"

	"nodehub/hub/autonomy"
	"nodehub/wire"
)

// writeAutonomy patches the Autonomy condition into the cloud's node status with the node's
// identity (autonomy.Condition.Write).
func (s *Server) writeAutonomy(ctx context.Context, c corev1.NodeCondition) error {
	patch, err := autonomy.Patch(c)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPatch, "/api/v1/nodes/"+s.cfg.NodeName+"/status", bytes.NewReader(patch))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/strategic-merge-patch+json")
	req.Header.Set("Accept", wire.MediaJSON)
	req.Header.Set("User-Agent", "nodehub/autonomy")
	resp, err := s.cloud().RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, autonomy.MaxNodeBody))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("hub: patch node status: %s", resp.Status)
	}
	return nil
}
