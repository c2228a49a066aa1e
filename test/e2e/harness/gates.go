package harness

import (
	"context"
	"slices"
)

// StartClusterWithArgs starts etcd and n kube-apiservers of release r, whose apiservers run with
// args after the release's own: the feature gates (alpha APIs, wire formats) a test turns on for
// itself, on a control plane no other test shares.
func StartClusterWithArgs(ctx context.Context, r Release, dir string, n int, args ...string) (*Cluster, error) {
	r.APIServerArgs = append(slices.Clip(r.APIServerArgs), args...)
	return StartClusterAt(ctx, r, dir, n)
}
