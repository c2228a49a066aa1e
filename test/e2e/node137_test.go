package e2e

import (
	"context"
	"io"
	"maps"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"nodehub/e2e/harness"
)

// node137Informers are what a v1.37 kubelet reads by default that a v1.34 one does not: its
// PodCertificateRequest informer (certificates.k8s.io/v1, GA and on in v1.37, of the requests of
// its node: spec.nodeName) and the ClusterTrustBundle informer its trust-bundle manager starts
// (all bundles, v1) once a pod projects one.
func node137Informers() []informerSpec {
	return []informerSpec{
		{name: "kubelet: podcertificaterequests of its node", ua: informerKubeletUA, resource: "podcertificaterequests", empty: true,
			opts: []informers.SharedInformerOption{informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = "spec.nodeName=" + harness.NodeName
			})},
			informer: func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
				return f.Certificates().V1().PodCertificateRequests().Informer()
			}},
		{name: "kubelet: clustertrustbundles", ua: informerKubeletUA, resource: "clustertrustbundles",
			informer: func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
				return f.Certificates().V1().ClusterTrustBundles().Informer()
			}},
	}
}

// What a v1.37 node reads by default, offline (TestNodeDefaultsOffline/v1.37): kubelet's
// PodCertificateRequest and ClusterTrustBundle informers sync offline, restarted, with what they
// synced online; certificates.k8s.io/v1's discovery (the trust-bundle manager asks it which
// version to inform of) is answered; and kubelet's GET of the ResourceClaim of a pod of its
// node (its DRA manager, before it starts the pod) is answered with the claim it read online.
// On v1.34 the claim only: PodCertificateRequest (alpha) and ClusterTrustBundle (beta) are off.
func TestNodeDefaultsOffline(t *testing.T) { eachRelease(t, nodeDefaultsOffline) }

func nodeDefaultsOffline(t *testing.T, c *harness.Cluster) {
	ctx := context.Background()
	v137 := c.Release.Name != "v1.34"
	ns := "node-defaults"
	if err := c.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gpu"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.example.com"}}}}}}
	if _, err := c.Admin.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod := newPod(ns, "claims")
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr("gpu")}}
	pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	if _, err := c.Admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	var specs []informerSpec
	if v137 {
		ca, err := os.ReadFile(c.PKI.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		ctb := &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "e2e-bundle"}, Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: string(ca)}}
		if _, err := c.Admin.CertificatesV1().ClusterTrustBundles().Create(ctx, ctb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		specs = node137Informers()
	}

	relay, err := harness.NewRelay(strings.TrimPrefix(c.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	h := startHubOn(t, c, t.TempDir(), relay.URL(), "--heartbeat-timeout-seconds=1")
	kubelet := h.Client(informerKubeletUA, true)
	claimPath := "/apis/resource.k8s.io/v1/namespaces/" + ns + "/resourceclaims/gpu"
	online, err := kubelet.ResourceV1().ResourceClaims(ns).Get(ctx, "gpu", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("kubelet's GET %s online: %v", claimPath, err)
	}
	var discovery string
	if v137 {
		code, body := rawGet(t, h, "/apis/certificates.k8s.io/v1")
		if code != http.StatusOK || !strings.Contains(body, `"podcertificaterequests"`) || !strings.Contains(body, `"clustertrustbundles"`) {
			t.Fatalf("certificates.k8s.io/v1 discovery online: %d %s", code, body)
		}
		discovery = body
	}
	running, unsynced := startInformers(h, specs, 60*time.Second)
	if len(unsynced) > 0 {
		t.Fatalf("online, not synced within 60 s: %s", strings.Join(unsynced, ", "))
	}
	want := map[string]map[string]string{}
	for _, r := range running {
		if err := r.log.watchListOnly(r.spec.resource); err != nil {
			t.Errorf("%s online did not read by watch-list: %v", r.spec.name, err)
		}
		if want[r.spec.name] = r.objects(); len(want[r.spec.name]) == 0 && !r.spec.empty {
			t.Errorf("%s online: nothing synced", r.spec.name)
		}
	}
	cacheWritten(t, h)
	for _, r := range running {
		want[r.spec.name] = r.objects()
		r.shutdown()
	}

	blackHole(t, h, relay)
	got, err := kubelet.ResourceV1().ResourceClaims(ns).Get(ctx, "gpu", metav1.GetOptions{})
	if err != nil || got.UID != online.UID || got.ResourceVersion != online.ResourceVersion {
		t.Fatalf("kubelet's GET %s offline: %v %+v, online it got uid %s rv %s", claimPath, err, got, online.UID, online.ResourceVersion)
	}
	if v137 {
		if code, body := rawGet(t, h, "/apis/certificates.k8s.io/v1"); code != http.StatusOK || body != discovery {
			t.Fatalf("certificates.k8s.io/v1 discovery offline: %d %s", code, body)
		}
	}
	offline, unsynced := startInformers(h, specs, 30*time.Second)
	defer func() {
		for _, r := range offline {
			r.shutdown()
		}
	}()
	for _, r := range offline {
		if strings.Contains(strings.Join(unsynced, "\n"), r.spec.name) {
			t.Errorf("%s restarted offline: not synced within 30 s; it sent:%v", r.spec.name, r.log)
		} else if got := r.objects(); !maps.Equal(got, want[r.spec.name]) {
			t.Errorf("%s restarted offline synced %v, online it had %v", r.spec.name, got, want[r.spec.name])
		}
	}
}

// rawGet sends a GET to the hub's proxy port as kubelet 1.37 (JSON) and returns status and body.
func rawGet(t *testing.T, h *harness.Hub, path string) (int, string) {
	t.Helper()
	return rawGetAs(t, h, informerKubeletUA, path)
}

// rawGetAs is rawGet as the client ua.
func rawGetAs(t *testing.T, h *harness.Hub, ua, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, h.ProxyURL+path, nil)
	req.Header.Set("User-Agent", ua)
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
