package filter

import (
	corev1 "k8s.io/api/core/v1"
)

// masterService points default/kubernetes at the hub for kubelet, so the KUBERNETES_SERVICE_HOST
// and _PORT kubelet gives pods reach the hub's secure port: the ClusterIP(s) become the hub's
// address and the "https" port its secure port.
type masterService struct {
	host string
	port int
}

func (*masterService) Name() string         { return "masterservice" }
func (*masterService) Resources() []string  { return []string{"v1/services"} }
func (*masterService) Components() []string { return []string{"kubelet"} }

// Wants looks for the name "kubernetes": `"name":"kubernetes"` in JSON, field 1 of length 10 in
// protobuf.
func (*masterService) Wants(raw []byte) bool {
	return mentions(raw, `"name":"kubernetes"`) || mentions(raw, "\x0a\x0akubernetes")
}

func (f *masterService) Filter(o *Object) (Verdict, error) {
	if !o.Is("default", "kubernetes") || f.host == "" {
		return Keep, nil
	}
	t, err := o.Typed()
	if err != nil {
		return Keep, err
	}
	svc := t.(*corev1.Service)
	svc.Spec.ClusterIP = f.host
	svc.Spec.ClusterIPs = []string{f.host}
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].Name == "https" {
			svc.Spec.Ports[i].Port = int32(f.port)
		}
	}
	return Changed, nil
}
