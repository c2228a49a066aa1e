package filter

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// serviceEnvUpdater sets the KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT entries that a
// pod's containers already carry to the hub's secure address and port (kubelet's view of pods).
type serviceEnvUpdater struct {
	host string
	port int
}

func (*serviceEnvUpdater) Name() string         { return "serviceenvupdater" }
func (*serviceEnvUpdater) Resources() []string  { return []string{"v1/pods"} }
func (*serviceEnvUpdater) Components() []string { return []string{"kubelet"} }

func (f *serviceEnvUpdater) Wants(raw []byte) bool {
	return f.host != "" && mentions(raw, "KUBERNETES_SERVICE_")
}

func (f *serviceEnvUpdater) Filter(o *Object) (Verdict, error) {
	if f.host == "" || !o.Mentions("KUBERNETES_SERVICE_HOST") && !o.Mentions("KUBERNETES_SERVICE_PORT") {
		return Keep, nil // the cheap test: most pods name neither
	}
	t, err := o.Typed()
	if err != nil {
		return Keep, err
	}
	pod := t.(*corev1.Pod)
	changed := false
	set := func(cs []corev1.Container) {
		for i := range cs {
			for j := range cs[i].Env {
				e := &cs[i].Env[j]
				switch e.Name {
				case "KUBERNETES_SERVICE_HOST":
					changed = changed || e.Value != f.host
					e.Value = f.host
				case "KUBERNETES_SERVICE_PORT":
					p := strconv.Itoa(f.port)
					changed = changed || e.Value != p
					e.Value = p
				}
			}
		}
	}
	set(pod.Spec.InitContainers)
	set(pod.Spec.Containers)
	if !changed {
		return Keep, nil
	}
	return Changed, nil
}
