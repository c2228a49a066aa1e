package local

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"nodehub/cache"
	"nodehub/wire"
)

// A node status write keeps the annotations it sets, as the apiserver's node status strategy does
// (it resets the spec alone): flannel writes its annotations (public-ip, backend) through
// nodes/<name>/status. Offline the answer and the writer's copy carry them, so flannel restarted
// offline again finds them and does not write them again; the spec stays the cloud's.
func TestOfflineNodeStatusWriteKeepsAnnotations(t *testing.T) {
	p := newProxy(t)
	const node = `{"kind":"Node","apiVersion":"v1","metadata":{"name":"edge-1","uid":"n1","resourceVersion":"5","annotations":{"a":"b"}},"spec":{"podCIDR":"10.244.1.0/24"},"status":{"conditions":[{"type":"Ready","status":"True"}]}}`
	m, err := wire.ExtractMeta([]byte(node), "nodes")
	if err != nil {
		t.Fatal(err)
	}
	flannel := caller{ua: "flanneld/v0.28.10", own: "flannel@sa-hash"}
	k := cache.Key{Resource: cache.Resource{Owner: flannel.own, Version: "v1", Resource: "nodes"}, Name: m.Name}
	h := cache.Header{ContentType: wire.MediaJSON, APIVersion: m.APIVersion, Kind: m.Kind, Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion}
	if err := p.Store.Put(k, &h, []byte(node)); err != nil {
		t.Fatal(err)
	}
	patch := `{"metadata":{"annotations":{"flannel.alpha.coreos.com/public-ip":"10.251.0.3"}},"spec":{"podCIDR":"10.9.9.0/24"},"status":{"conditions":[{"type":"NetworkUnavailable","status":"False"}]}}`
	w := flannel.send(t, p, http.MethodPatch, "/api/v1/nodes/edge-1/status", "application/strategic-merge-patch+json", patch)
	if w.Code != http.StatusOK {
		t.Fatalf("flannel's node status patch offline: %d %s", w.Code, w.Body)
	}
	it, err := p.Store.GetObject(k)
	if err != nil {
		t.Fatal(err)
	}
	for what, body := range map[string][]byte{"answer": w.Body.Bytes(), "copy": it.Body} {
		var got struct {
			Metadata struct{ Annotations map[string]string }
			Spec     struct{ PodCIDR string }
			Status   struct{ Conditions []struct{ Type string } }
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		if got.Metadata.Annotations["flannel.alpha.coreos.com/public-ip"] != "10.251.0.3" || got.Metadata.Annotations["a"] != "b" {
			t.Errorf("the %s's annotations: %v", what, got.Metadata.Annotations)
		}
		if got.Spec.PodCIDR != "10.244.1.0/24" || len(got.Status.Conditions) != 2 || !bytes.Contains(body, []byte(`"uid":"n1"`)) {
			t.Errorf("the %s: %s", what, body)
		}
	}
}
