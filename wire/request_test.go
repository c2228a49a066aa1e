package wire

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	tests := []struct {
		name, method, url string
		want              RequestInfo
	}{
		{"kubelet lists its node", "GET", "/api/v1/nodes?fieldSelector=metadata.name%3Dedge-1&limit=500&resourceVersion=0",
			RequestInfo{IsResource: true, Verb: "list", Version: "v1", Resource: "nodes", Name: "edge-1", FieldSelector: "metadata.name=edge-1", Limit: 500, ResourceVersion: "0"}},
		{"kubelet watches its node", "GET", "/api/v1/nodes?allowWatchBookmarks=true&fieldSelector=metadata.name%3Dedge-1&resourceVersion=12&timeout=7m4s&timeoutSeconds=424&watch=true",
			RequestInfo{IsResource: true, Verb: "watch", Version: "v1", Resource: "nodes", Name: "edge-1", FieldSelector: "metadata.name=edge-1", ResourceVersion: "12", TimeoutSeconds: 424, AllowWatchBookmarks: true}},
		{"kubelet lists its pods", "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1&limit=500&resourceVersion=0",
			RequestInfo{IsResource: true, Verb: "list", Version: "v1", Resource: "pods", FieldSelector: "spec.nodeName=edge-1", Limit: 500, ResourceVersion: "0"}},
		{"kubelet patches node status", "PATCH", "/api/v1/nodes/edge-1/status?timeout=10s",
			RequestInfo{IsResource: true, Verb: "patch", Version: "v1", Resource: "nodes", Name: "edge-1", Subresource: "status"}},
		{"kubelet renews its lease", "PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/edge-1?timeout=10s",
			RequestInfo{IsResource: true, Verb: "update", Group: "coordination.k8s.io", Version: "v1", Resource: "leases", Namespace: "kube-node-lease", Name: "edge-1"}},
		{"kubelet creates an event", "POST", "/api/v1/namespaces/default/events",
			RequestInfo{IsResource: true, Verb: "create", Version: "v1", Resource: "events", Namespace: "default"}},
		{"kubelet asks a token", "POST", "/api/v1/namespaces/default/serviceaccounts/default/token",
			RequestInfo{IsResource: true, Verb: "create", Version: "v1", Resource: "serviceaccounts", Namespace: "default", Name: "default", Subresource: "token"}},
		{"kube-proxy lists endpointslices", "GET", "/apis/discovery.k8s.io/v1/endpointslices?labelSelector=%21service.kubernetes.io%2Fheadless%2C%21service.kubernetes.io%2Fservice-proxy-name&limit=500&resourceVersion=0",
			RequestInfo{IsResource: true, Verb: "list", Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices", LabelSelector: "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name", Limit: 500, ResourceVersion: "0"}},
		{"streaming list", "GET", "/api/v1/namespaces/kube-system/configmaps?allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&watch=1",
			RequestInfo{IsResource: true, Verb: "watch", Version: "v1", Resource: "configmaps", Namespace: "kube-system", AllowWatchBookmarks: true, ResourceVersionMatch: "NotOlderThan", SendInitialEvents: true, HasSendInitialEvents: true}},
		{"a sharded list", "GET", "/api/v1/pods?shardSelector=shardRange%28object.metadata.uid%2C+%270x0%27%2C+%270x8000000000000000%27%29",
			RequestInfo{IsResource: true, Verb: "list", Version: "v1", Resource: "pods", ShardSelector: "shardRange(object.metadata.uid, '0x0', '0x8000000000000000')"}},
		{"kubectl logs", "GET", "/api/v1/namespaces/default/pods/p/log?container=c",
			RequestInfo{IsResource: true, Verb: "get", Version: "v1", Resource: "pods", Namespace: "default", Name: "p", Subresource: "log"}},
		{"kubectl exec", "POST", "/api/v1/namespaces/default/pods/p/exec?command=sh&stdin=true&tty=true",
			RequestInfo{IsResource: true, Verb: "create", Version: "v1", Resource: "pods", Namespace: "default", Name: "p", Subresource: "exec"}},
		{"pod proxy", "GET", "/api/v1/namespaces/default/pods/p:8080/proxy/metrics",
			RequestInfo{IsResource: true, Verb: "proxy", Version: "v1", Resource: "pods", Namespace: "default", Name: "p:8080", Subresource: "proxy"}},
		{"legacy proxy prefix", "GET", "/api/v1/proxy/namespaces/default/services/s/x",
			RequestInfo{IsResource: true, Verb: "proxy", Version: "v1", Resource: "services", Namespace: "default", Name: "s", Subresource: "x"}},
		{"legacy watch of one pod", "GET", "/api/v1/watch/namespaces/default/pods/p",
			RequestInfo{IsResource: true, Verb: "watch", Version: "v1", Resource: "pods", Namespace: "default", Name: "p"}},
		{"legacy watch of all pods", "GET", "/api/v1/watch/pods",
			RequestInfo{IsResource: true, Verb: "watch", Version: "v1", Resource: "pods"}},
		{"list namespaces", "GET", "/api/v1/namespaces",
			RequestInfo{IsResource: true, Verb: "list", Version: "v1", Resource: "namespaces"}},
		{"get a namespace", "GET", "/api/v1/namespaces/default",
			RequestInfo{IsResource: true, Verb: "get", Version: "v1", Resource: "namespaces", Namespace: "default", Name: "default"}},
		{"namespace status", "PUT", "/api/v1/namespaces/default/status",
			RequestInfo{IsResource: true, Verb: "update", Version: "v1", Resource: "namespaces", Namespace: "default", Name: "default", Subresource: "status"}},
		{"delete collection", "DELETE", "/api/v1/namespaces/default/pods?labelSelector=a%3Db",
			RequestInfo{IsResource: true, Verb: "deletecollection", Version: "v1", Resource: "pods", Namespace: "default", LabelSelector: "a=b"}},
		{"delete one", "DELETE", "/api/v1/namespaces/default/pods/p",
			RequestInfo{IsResource: true, Verb: "delete", Version: "v1", Resource: "pods", Namespace: "default", Name: "p"}},
		{"a CRD", "GET", "/apis/apps.openyurt.io/v1beta2/nodepools/pool-a",
			RequestInfo{IsResource: true, Verb: "get", Group: "apps.openyurt.io", Version: "v1beta2", Resource: "nodepools", Name: "pool-a"}},
		{"version", "GET", "/version", RequestInfo{Verb: "get"}},
		{"core discovery", "GET", "/api/v1", RequestInfo{Verb: "get"}},
		{"group discovery", "GET", "/apis/apps/v1", RequestInfo{Verb: "get"}},
		{"aggregated discovery", "GET", "/apis", RequestInfo{Verb: "get"}},
		{"healthz", "GET", "/healthz", RequestInfo{Verb: "get"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := url.Parse(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseURL(tt.method, u)
			if err != nil {
				t.Fatal(err)
			}
			tt.want.Path = u.Path
			if *got != tt.want {
				t.Errorf("ParseURL(%s %s)\n got %+v\nwant %+v", tt.method, tt.url, *got, tt.want)
			}
		})
	}
}

func TestParseURLErrors(t *testing.T) {
	for _, raw := range []string{
		"/api/v1/pods?timeoutSeconds=abc",
		"/api/v1/pods?limit=-1",
		"/api/v1/pods?allowWatchBookmarks=maybe",
		"/api/v1/pods?a=%zz",
		"/api/v1/watch",
		"/api/v1/pods?labelSelector=a+in+(" + strings.Repeat("x,", MaxSelectorBytes/2) + "y)",
		"/api/v1/pods?fieldSelector=metadata.name%3D" + strings.Repeat("n", MaxSelectorBytes),
	} {
		u, err := url.Parse(raw)
		if err != nil {
			u = &url.URL{Path: "/api/v1/pods", RawQuery: "a=%zz"}
		}
		if _, err := ParseURL("GET", u); err == nil {
			t.Errorf("%s: no error", raw)
		}
	}
}

func TestParseRequestHeaders(t *testing.T) {
	r, _ := http.NewRequest("PUT", "http://hub/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n", nil)
	r.Header.Set("User-Agent", "Kubelet/v1.34.4 (linux/arm64) kubernetes/abc")
	r.Header.Set("Accept", "application/vnd.kubernetes.protobuf, */*")
	r.Header.Set("Content-Type", "application/vnd.kubernetes.protobuf")
	ri, err := ParseRequest(r)
	if err != nil {
		t.Fatal(err)
	}
	if ri.Component != "kubelet" || !ri.Accept.IsProtobuf() || !ri.ContentType.IsProtobuf() {
		t.Fatalf("got component %q accept %+v content %+v", ri.Component, ri.Accept, ri.ContentType)
	}
	if got := ri.GVR(); got != "coordination.k8s.io/v1/leases" {
		t.Fatalf("GVR %q", got)
	}
}

func TestComponentOf(t *testing.T) {
	for ua, want := range map[string]string{
		"kubelet/v1.34.4 (linux/arm64) kubernetes/abc":     "kubelet",
		"kube-proxy/v1.34.4 (linux/amd64) kubernetes/abc":  "kube-proxy",
		"coredns/1.11.1 (linux/amd64) kubernetes/abc":      "coredns",
		"kubectl1.34/v1.34.4 (linux/amd64) kubernetes/abc": "kubectl1.34",
		"Go-http-client/1.1":                               "go-http-client",
		"":                                                 "",
		"flanneld":                                         "flanneld",
	} {
		if got := ComponentOf(ua); got != want {
			t.Errorf("ComponentOf(%q) = %q, want %q", ua, got, want)
		}
	}
}

func TestNegotiateAccept(t *testing.T) {
	for accept, want := range map[string]MediaType{
		"":                                    {Type: MediaJSON},
		"*/*":                                 {Type: MediaJSON},
		"application/vnd.kubernetes.protobuf": {Type: MediaProtobuf},
		"application/vnd.kubernetes.protobuf, */*":                                            {Type: MediaProtobuf},
		"application/json;as=Table;v=v1;g=meta.k8s.io,application/json":                       {Type: MediaJSON, As: "Table", Version: "v1", Group: "meta.k8s.io"},
		"application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1": {Type: MediaProtobuf, As: "PartialObjectMetadataList", Group: "meta.k8s.io", Version: "v1"},
		"text/html, application/yaml":                                                         {Type: MediaJSON},
	} {
		if got := NegotiateAccept(accept); got != want {
			t.Errorf("NegotiateAccept(%q) = %+v, want %+v", accept, got, want)
		}
	}
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"/api/v1/nodes?fieldSelector=metadata.name%3Dedge-1&watch=true",
		"/apis/apps/v1/namespaces/x/deployments/d/scale",
		"/api/v1/watch/namespaces/a/pods/b",
		"/api/v1/proxy/nodes/n/x",
		"/apis",
		"//api//v1//namespaces",
	} {
		f.Add("GET", s)
	}
	f.Fuzz(func(t *testing.T, method, raw string) {
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		ri, err := ParseURL(method, u)
		if err != nil {
			return
		}
		if ri.IsResource && ri.Resource == "" {
			t.Fatalf("resource request without a resource: %q", raw)
		}
		if !ri.IsResource && (ri.Resource != "" || ri.Name != "") {
			t.Fatalf("non-resource request with resource fields: %q %+v", raw, ri)
		}
	})
}
