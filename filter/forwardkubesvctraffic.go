package filter

import (
	discoveryv1 "k8s.io/api/discovery/v1"
)

// forwardKubeSvcTraffic points kube-proxy's default/kubernetes EndpointSlice at the hub, so pods'
// traffic to the kubernetes service goes through the hub (and keeps working offline).
type forwardKubeSvcTraffic struct {
	host string
	port int
}

func (*forwardKubeSvcTraffic) Name() string { return "forwardkubesvctraffic" }
func (*forwardKubeSvcTraffic) Resources() []string {
	return []string{"discovery.k8s.io/v1/endpointslices"}
}
func (*forwardKubeSvcTraffic) Components() []string { return []string{"kube-proxy"} }

// Wants looks for the label kubernetes.io/service-name=kubernetes: as JSON, or as the protobuf
// map entry's value (field 2 of length 10).
func (*forwardKubeSvcTraffic) Wants(raw []byte) bool {
	return mentions(raw, `"kubernetes.io/service-name":"kubernetes"`) || mentions(raw, "\x12\x0akubernetes")
}

func (f *forwardKubeSvcTraffic) Filter(o *Object) (Verdict, error) {
	if o.Meta.Namespace != "default" || o.Meta.Labels[discoveryv1.LabelServiceName] != "kubernetes" || f.host == "" {
		return Keep, nil
	}
	t, err := o.Typed()
	if err != nil {
		return Keep, err
	}
	s := t.(*discoveryv1.EndpointSlice)
	for i := range s.Endpoints {
		s.Endpoints[i].Addresses = []string{f.host}
	}
	if len(s.Endpoints) > 1 {
		s.Endpoints = s.Endpoints[:1]
	}
	port := int32(f.port)
	for i := range s.Ports {
		if s.Ports[i].Name != nil && *s.Ports[i].Name == "https" {
			s.Ports[i].Port = &port
		}
	}
	return Changed, nil
}
