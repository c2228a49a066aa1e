package filter

import "strings"

// nodePortIsolation hides NodePort and LoadBalancer services from kube-proxy on nodes of pools
// the service does not listen in: annotation nodeport.openyurt.io/listen is a comma list of pool
// names, "-pool" to exclude one, "*" for all. Services without the annotation are kept.
type nodePortIsolation struct{ pool string }

func (*nodePortIsolation) Name() string         { return "nodeportisolation" }
func (*nodePortIsolation) Resources() []string  { return []string{"v1/services"} }
func (*nodePortIsolation) Components() []string { return []string{"kube-proxy"} }

const listenAnnotation = "nodeport.openyurt.io/listen"

func (f *nodePortIsolation) Wants(raw []byte) bool {
	return f.pool != "" && mentions(raw, listenAnnotation)
}

func (f *nodePortIsolation) Filter(o *Object) (Verdict, error) {
	if t := o.Meta.Fields["spec.type"]; t != "NodePort" && t != "LoadBalancer" {
		return Keep, nil
	}
	listen, ok := o.Annotations()[listenAnnotation]
	if !ok || f.pool == "" {
		return Keep, nil
	}
	if poolListens(listen, f.pool) {
		return Keep, nil
	}
	return Drop, nil
}

// poolListens evaluates a listen annotation for one pool: an explicit "-pool" wins, then "pool"
// or "*".
func poolListens(listen, pool string) bool {
	all, named := false, false
	for _, p := range strings.Split(listen, ",") {
		switch p = strings.TrimSpace(p); p {
		case "-" + pool:
			return false
		case pool:
			named = true
		case "*":
			all = true
		}
	}
	return named || all
}
