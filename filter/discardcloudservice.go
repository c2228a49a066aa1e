package filter

// discardCloudService hides from kube-proxy the services an edge node cannot serve: LoadBalancer
// services annotated svc.openyurt.io/discard=true, and the tunnel server's internal service.
type discardCloudService struct{}

func (*discardCloudService) Name() string         { return "discardcloudservice" }
func (*discardCloudService) Resources() []string  { return []string{"v1/services"} }
func (*discardCloudService) Components() []string { return []string{"kube-proxy"} }

func (*discardCloudService) Wants(raw []byte) bool {
	return mentions(raw, "svc.openyurt.io/discard") || mentions(raw, "x-tunnel-server-internal-svc")
}

func (*discardCloudService) Filter(o *Object) (Verdict, error) {
	if o.Is("kube-system", "x-tunnel-server-internal-svc") {
		return Drop, nil
	}
	if o.Meta.Fields["spec.type"] == "LoadBalancer" && o.Annotations()["svc.openyurt.io/discard"] == "true" {
		return Drop, nil
	}
	return Keep, nil
}
