package filter

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Topology keys (the openyurt.io/topologyKeys annotation of a Service).
const (
	TopologyAnnotation = "openyurt.io/topologyKeys"
	topologyHostname   = "kubernetes.io/hostname"
	topologyNodePool   = "openyurt.io/nodepool"
	topologyZone       = "kubernetes.io/zone"
)

// Topology is what servicetopology needs to know about the cluster; the hub keeps it current by
// list/watching Services and this node's NodePool.
type Topology interface {
	// TopologyKey is the openyurt.io/topologyKeys annotation of a service ("" when it has none).
	TopologyKey(namespace, service string) string
	// PoolNodes are the nodes of this node's pool; nil when unknown.
	PoolNodes() map[string]bool
}

// serviceTopology keeps, for services annotated openyurt.io/topologyKeys, only the endpoints on
// this node (kubernetes.io/hostname) or on nodes of this node's pool (openyurt.io/nodepool,
// kubernetes.io/zone), in EndpointSlices and in v1 Endpoints. A slice filtered to nothing is kept,
// empty.
type serviceTopology struct {
	node string
	topo Topology
}

func (*serviceTopology) Name() string { return "servicetopology" }
func (*serviceTopology) Resources() []string {
	return []string{"discovery.k8s.io/v1/endpointslices", "v1/endpoints"}
}
func (*serviceTopology) Components() []string {
	return []string{"kube-proxy", "coredns", "nginx-ingress-controller"}
}

// keep returns the predicate on an endpoint's node for the service, or nil to keep everything.
func (f *serviceTopology) keep(ns, svc string) func(node string) bool {
	if f.topo == nil || svc == "" {
		return nil
	}
	switch f.topo.TopologyKey(ns, svc) {
	case topologyHostname:
		return func(n string) bool { return n == f.node }
	case topologyNodePool, topologyZone:
		pool := f.topo.PoolNodes()
		if pool == nil {
			return func(n string) bool { return n == f.node } // pool unknown: this node is surely in it
		}
		return func(n string) bool { return pool[n] || n == f.node }
	}
	return nil
}

// Wants is true while any service has a topology key: which slice belongs to which service needs
// the slice's metadata.
func (f *serviceTopology) Wants([]byte) bool {
	t, ok := f.topo.(interface{ Any() bool })
	return f.topo != nil && (!ok || t.Any())
}

func (f *serviceTopology) Filter(o *Object) (Verdict, error) {
	svc := o.Meta.Labels[discoveryv1.LabelServiceName]
	if o.Meta.Kind == "Endpoints" {
		svc = o.Meta.Name
	}
	keep := f.keep(o.Meta.Namespace, svc)
	if keep == nil {
		return Keep, nil
	}
	t, err := o.Typed()
	if err != nil {
		return Keep, err
	}
	changed := false
	switch obj := t.(type) {
	case *discoveryv1.EndpointSlice:
		out := obj.Endpoints[:0:0]
		for _, e := range obj.Endpoints {
			if e.NodeName != nil && keep(*e.NodeName) {
				out = append(out, e)
			}
		}
		changed = len(out) != len(obj.Endpoints)
		obj.Endpoints = out
	case *corev1.Endpoints:
		var subsets []corev1.EndpointSubset
		for _, ss := range obj.Subsets {
			n := len(ss.Addresses) + len(ss.NotReadyAddresses)
			ss.Addresses = filterAddresses(ss.Addresses, keep)
			ss.NotReadyAddresses = filterAddresses(ss.NotReadyAddresses, keep)
			changed = changed || len(ss.Addresses)+len(ss.NotReadyAddresses) != n
			if len(ss.Addresses)+len(ss.NotReadyAddresses) > 0 {
				subsets = append(subsets, ss)
			}
		}
		obj.Subsets = subsets
	}
	if !changed {
		return Keep, nil
	}
	return Changed, nil
}

func filterAddresses(as []corev1.EndpointAddress, keep func(string) bool) []corev1.EndpointAddress {
	out := as[:0:0]
	for _, a := range as {
		if a.NodeName != nil && keep(*a.NodeName) {
			out = append(out, a)
		}
	}
	return out
}
