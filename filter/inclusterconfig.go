package filter

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// inClusterConfig comments out the kubeconfig line of kube-system/kube-proxy's config.conf for
// kubelet, so kube-proxy pods use in-cluster config (the hub, through the filtered
// KUBERNETES_SERVICE_HOST) instead of a kubeconfig that names the cloud.
type inClusterConfig struct{}

func (*inClusterConfig) Name() string         { return "inclusterconfig" }
func (*inClusterConfig) Resources() []string  { return []string{"v1/configmaps"} }
func (*inClusterConfig) Components() []string { return []string{"kubelet"} }

func (*inClusterConfig) Wants(raw []byte) bool { return mentions(raw, "kubeconfig:") }

func (*inClusterConfig) Filter(o *Object) (Verdict, error) {
	if !o.Is("kube-system", "kube-proxy") || !o.Mentions("kubeconfig:") {
		return Keep, nil
	}
	t, err := o.Typed()
	if err != nil {
		return Keep, err
	}
	cm := t.(*corev1.ConfigMap)
	conf, ok := cm.Data["config.conf"]
	if !ok {
		return Keep, nil
	}
	lines := strings.Split(conf, "\n")
	changed := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "kubeconfig:") {
			indent := l[:len(l)-len(strings.TrimLeft(l, " "))]
			lines[i] = indent + "#" + strings.TrimLeft(l, " ")
			changed = true
		}
	}
	if !changed {
		return Keep, nil
	}
	cm.Data["config.conf"] = strings.Join(lines, "\n")
	return Changed, nil
}
