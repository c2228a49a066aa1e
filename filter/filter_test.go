package filter

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/wire"
)

func set(t *testing.T, cfg Config) *Set {
	t.Helper()
	cfg.Enabled = true
	if cfg.MasterServiceHost == "" {
		cfg.MasterServiceHost, cfg.MasterServicePort = "169.254.2.1", 10268
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func chain(t testing.TB, s *Set, component, gvrPath string) *Chain {
	ri, err := wire.ParseURL("GET", mustURL(gvrPath))
	if err != nil {
		panic(err)
	}
	ri.Component = component
	return s.For(ri)
}

func encodeBoth(t *testing.T, obj wire.Typed) map[string][]byte {
	t.Helper()
	js, err := wire.Encode(obj, false)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := wire.Encode(obj, true)
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{"json": js, "protobuf": pb}
}

func service(ns, name, typ string, ann map[string]string) *corev1.Service {
	return &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: ann, ResourceVersion: "5"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceType(typ), ClusterIP: "10.96.0.1", ClusterIPs: []string{"10.96.0.1"},
			Ports: []corev1.ServicePort{{Name: "https", Port: 443}}}}
}

func TestMasterServiceOnObjectsListsAndWatch(t *testing.T) {
	s := set(t, Config{})
	c := chain(t, s, "kubelet", "/api/v1/services")
	if c == nil || c.Names()[0] != "masterservice" {
		t.Fatalf("chain %v", c)
	}
	if chain(t, s, "coredns", "/api/v1/services") != nil {
		t.Fatal("masterservice approved coredns")
	}
	for format, raw := range encodeBoth(t, service("default", "kubernetes", "ClusterIP", nil)) {
		out, err := c.Body(raw, media(format), false)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := wire.Decode(out)
		svc := got.(*corev1.Service)
		if svc.Spec.ClusterIP != "169.254.2.1" || svc.Spec.Ports[0].Port != 10268 {
			t.Fatalf("%s: %+v", format, svc.Spec)
		}
		if format == "protobuf" && !wire.IsProtobuf(out) {
			t.Fatal("protobuf in, not protobuf out")
		}
		other := encodeBoth(t, service("default", "web", "ClusterIP", nil))[format]
		if out, _ := c.Body(other, media(format), false); &out[0] != &other[0] {
			t.Fatalf("%s: an untouched object was re-encoded", format)
		}
	}
}

func media(format string) wire.MediaType {
	if format == "protobuf" {
		return wire.MediaType{Type: wire.MediaProtobuf}
	}
	return wire.MediaType{Type: wire.MediaJSON}
}

func TestDiscardAndNodePortIsolationDropFromListsAndWatches(t *testing.T) {
	s := set(t, Config{NodePool: "pool-a"})
	c := chain(t, s, "kube-proxy", "/api/v1/services")
	keep := service("ns", "keep", "ClusterIP", nil)
	lb := service("ns", "lb", "LoadBalancer", map[string]string{"svc.openyurt.io/discard": "true"})
	tunnel := service("kube-system", "x-tunnel-server-internal-svc", "ClusterIP", nil)
	np := service("ns", "np-b", "NodePort", map[string]string{listenAnnotation: "pool-b"})
	npOK := service("ns", "np-star", "NodePort", map[string]string{listenAnnotation: "*,-pool-c"})
	npNo := service("ns", "np-minus", "NodePort", map[string]string{listenAnnotation: "*,-pool-a"})
	for _, format := range []string{"json", "protobuf"} {
		list := &corev1.ServiceList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceList"}, ListMeta: metav1.ListMeta{ResourceVersion: "9"}}
		for _, svc := range []*corev1.Service{keep, lb, tunnel, np, npOK, npNo} {
			c := *svc
			c.TypeMeta = metav1.TypeMeta{}
			list.Items = append(list.Items, c)
		}
		var raw []byte
		if format == "json" {
			raw, _ = json.Marshal(list)
		} else {
			raw, _ = wire.EncodeProto("v1", "ServiceList", list)
		}
		out, err := c.Body(raw, media(format), true)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		sp := wire.NewListSplitter(media(format), wire.ListHandler{Item: func(b []byte) error {
			m, _ := wire.ExtractMeta(b, "services")
			names = append(names, m.Name)
			return nil
		}})
		sp.Write(out)
		if err := sp.Close(); err != nil {
			t.Fatal(err)
		}
		if got := join(names); got != "keep,np-star" {
			t.Fatalf("%s list kept %s", format, got)
		}

		// In a watch a dropped object becomes DELETED; the rest pass as they came.
		frame := wire.EncodeJSONWatchEvent
		if format == "protobuf" {
			frame = wire.EncodeProtoWatchEvent
		}
		var stream []byte
		for _, svc := range []*corev1.Service{keep, lb} {
			stream = append(stream, frame(wire.WatchEvent{Type: wire.EventModified, Object: encodeBoth(t, svc)[format]})...)
		}
		bm := frame(wire.WatchEvent{Type: wire.EventBookmark, Object: wire.BookmarkObject("v1", "Service", "10", false, format == "protobuf")})
		stream = append(stream, bm...)
		got, _ := io.ReadAll(c.Watch(io.NopCloser(bytes.NewReader(stream)), media(format)))
		var types []string
		wsp := wire.NewWatchSplitter(media(format), func(ev wire.WatchEvent) error {
			m, _ := wire.ExtractMeta(ev.Object, "services")
			types = append(types, ev.Type+":"+m.Name)
			return nil
		})
		wsp.Write(got)
		if j := join(types); j != "MODIFIED:keep,DELETED:lb,BOOKMARK:" {
			t.Fatalf("%s watch: %s", format, j)
		}
		first := frame(wire.WatchEvent{Type: wire.EventModified, Object: encodeBoth(t, keep)[format]})
		if !bytes.HasPrefix(got, first) || !bytes.HasSuffix(got, bm) {
			t.Fatalf("%s watch: untouched events changed bytes", format)
		}
	}
}

func join(s []string) string {
	out := ""
	for i, v := range s {
		if i > 0 {
			out += ","
		}
		out += v
	}
	return out
}

func TestForwardKubeSvcTrafficInClusterConfigServiceEnv(t *testing.T) {
	s := set(t, Config{})
	port, name := int32(6443), "https"
	slice := &discoveryv1.EndpointSlice{TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "kubernetes", Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
		AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}, {Addresses: []string{"10.0.0.2"}}},
		Ports: []discoveryv1.EndpointPort{{Name: &name, Port: &port}}}
	c := chain(t, s, "kube-proxy", "/apis/discovery.k8s.io/v1/endpointslices")
	out, _ := c.Apply(encodeBoth(t, slice)["protobuf"])
	got, _ := wire.Decode(out)
	gs := got.(*discoveryv1.EndpointSlice)
	if len(gs.Endpoints) != 1 || gs.Endpoints[0].Addresses[0] != "169.254.2.1" || *gs.Ports[0].Port != 10268 {
		t.Fatalf("forwardkubesvctraffic: %+v", gs)
	}

	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy"},
		Data: map[string]string{"config.conf": "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nclientConnection:\n  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf\nmode: iptables\n"}}
	out, v := chain(t, s, "kubelet", "/api/v1/configmaps").Apply(encodeBoth(t, cm)["json"])
	got, _ = wire.Decode(out)
	if v != Changed || got.(*corev1.ConfigMap).Data["config.conf"] != "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nclientConnection:\n  #kubeconfig: /var/lib/kube-proxy/kubeconfig.conf\nmode: iptables\n" {
		t.Fatalf("inclusterconfig: %v %q", v, got.(*corev1.ConfigMap).Data)
	}

	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Env: []corev1.EnvVar{{Name: "KUBERNETES_SERVICE_HOST", Value: "10.96.0.1"}, {Name: "KUBERNETES_SERVICE_PORT", Value: "443"}, {Name: "X", Value: "y"}}}}}}
	out, v = chain(t, s, "kubelet", "/api/v1/pods").Apply(encodeBoth(t, pod)["protobuf"])
	got, _ = wire.Decode(out)
	env := got.(*corev1.Pod).Spec.Containers[0].Env
	if v != Changed || env[0].Value != "169.254.2.1" || env[1].Value != "10268" || env[2].Value != "y" {
		t.Fatalf("serviceenvupdater: %v %+v", v, env)
	}
	plain := encodeBoth(t, &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "q"}})["json"]
	if _, v := chain(t, s, "kubelet", "/api/v1/pods").Apply(plain); v != Keep {
		t.Fatal("a pod without the variables was changed")
	}
}

func TestConfiguration(t *testing.T) {
	if _, err := New(Config{Enabled: true, Disabled: []string{"nosuch"}}); err == nil {
		t.Fatal("unknown filter accepted")
	}
	s := set(t, Config{Disabled: []string{"masterservice"}, Components: map[string][]string{"discardcloudservice": {"coredns"}}})
	if chain(t, s, "kubelet", "/api/v1/services") != nil {
		t.Fatal("disabled filter still runs")
	}
	if c := chain(t, s, "coredns", "/api/v1/services"); c == nil || c.Names()[0] != "discardcloudservice" {
		t.Fatalf("--filter-components did not add coredns: %v", c)
	}
	if chain(t, set(t, Config{Disabled: []string{"*"}}), "kubelet", "/api/v1/services") != nil {
		t.Fatal("* did not disable all")
	}
	cloud := set(t, Config{WorkingMode: "cloud"})
	if c := chain(t, cloud, "kube-proxy", "/apis/discovery.k8s.io/v1/endpointslices"); c == nil || c.Uses("forwardkubesvctraffic") {
		t.Fatalf("cloud mode: %v", c)
	}
	ri, _ := wire.ParseURL("DELETE", mustURL("/api/v1/namespaces/default/services/kubernetes"))
	ri.Component = "kubelet"
	if set(t, Config{}).For(ri) != nil {
		t.Fatal("a delete was filtered")
	}
}

type fakeTopology struct {
	keys map[string]string
	pool map[string]bool
}

func (f fakeTopology) TopologyKey(ns, svc string) string { return f.keys[ns+"/"+svc] }
func (f fakeTopology) PoolNodes() map[string]bool        { return f.pool }

func TestServiceTopology(t *testing.T) {
	topo := fakeTopology{keys: map[string]string{"ns/host": "kubernetes.io/hostname", "ns/pool": "openyurt.io/nodepool"},
		pool: map[string]bool{"edge-1": true, "edge-2": true}}
	s := set(t, Config{NodeName: "edge-1", Topology: topo})
	slice := func(svc string) *discoveryv1.EndpointSlice {
		sl := &discoveryv1.EndpointSlice{TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
			ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: svc + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
			AddressType: discoveryv1.AddressTypeIPv4}
		for _, n := range []string{"edge-1", "edge-2", "cloud-1"} {
			node := n
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, NodeName: &node})
		}
		return sl
	}
	c := chain(t, s, "kube-proxy", "/apis/discovery.k8s.io/v1/endpointslices")
	for svc, want := range map[string]int{"host": 1, "pool": 2, "plain": 3} {
		for format, raw := range encodeBoth(t, slice(svc)) {
			out, _ := c.Apply(raw)
			got, _ := wire.Decode(out)
			if n := len(got.(*discoveryv1.EndpointSlice).Endpoints); n != want {
				t.Errorf("%s %s: %d endpoints, want %d", svc, format, n, want)
			}
		}
	}
	// v1 Endpoints too (YurtHub forgets them).
	ep := &corev1.Endpoints{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Endpoints"}, ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "host"}}
	var addrs []corev1.EndpointAddress
	for _, n := range []string{"edge-1", "edge-2"} {
		node := n
		addrs = append(addrs, corev1.EndpointAddress{IP: "10.0.0.1", NodeName: &node})
	}
	ep.Subsets = []corev1.EndpointSubset{{Addresses: addrs}}
	out, v := chain(t, s, "coredns", "/api/v1/endpoints").Apply(encodeBoth(t, ep)["json"])
	got, _ := wire.Decode(out)
	if v != Changed || len(got.(*corev1.Endpoints).Subsets[0].Addresses) != 1 {
		t.Fatalf("endpoints: %v %+v", v, got)
	}
}
