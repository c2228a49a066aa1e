package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"nodehub/e2e/harness"
)

const (
	joinTokenID     = "e2ejoi"
	joinTokenSecret = "0123456789abcdef"
	joinToken       = joinTokenID + "." + joinTokenSecret
)

// startControllerManager runs kube-controller-manager (CSR approving and signing, bootstrap
// signer, ...) for one test, with certificates living d (0: the default year).
func startControllerManager(t *testing.T, d time.Duration) {
	t.Helper()
	startControllerManagerOn(t, cluster, d)
}

// startControllerManagerOn is startControllerManager on cluster c.
func startControllerManagerOn(t *testing.T, cluster *harness.Cluster, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := cluster.StartControllerManager(ctx, harness.ControllerOptions{SigningDuration: d})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("kube-controller-manager log:\n%s", tailString(p.Log(), 3000))
		}
	})
	if err := cluster.SetupJoin(ctx, joinTokenID, joinTokenSecret); err != nil {
		t.Fatal(err)
	}
}

// startJoiningHub runs nodehub with no credentials but the join flags in args.
func startJoiningHub(t *testing.T, dir, servers string, wait bool, args ...string) *harness.Hub {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, err := cluster.StartHub(ctx, harness.HubOptions{Bin: nodehub, Dir: dir, Servers: servers, Bootstrap: true, NoWait: !wait, Args: args})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Stop()
		if t.Failed() {
			t.Logf("nodehub log:\n%s", tailString(h.Log(), 8000))
		}
	})
	if wait {
		if err := h.WaitHTTP(ctx, "/v1/readyz", 45*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// whoAmI asks the apiserver (through cfg) who the request was authenticated as.
func whoAmI(t *testing.T, cfg *rest.Config) authenticationv1.UserInfo {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(cfg)
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview: %v", err)
	}
	return r.Status.UserInfo
}

// storedCert reads the node certificate the hub stored.
func storedCert(t *testing.T, h *harness.Hub, name string) *x509.Certificate {
	t.Helper()
	path := filepath.Join(h.RootDir, "pki", name)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("%s: mode %v, want 0600", path, st.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	b, rest := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" {
		t.Fatalf("%s: no certificate first", path)
	}
	if !strings.Contains(string(rest), "PRIVATE KEY") {
		t.Fatalf("%s: no key after the certificate", path)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A gateway joins with nothing but the server, its name, a join token and the CA pin; it gets
// its own certificate and proxies as system:node:edge-1. Restarted without the token, it uses
// the certificate it stored.
func TestTokenBootstrapJoinsAsNode(t *testing.T) {
	startControllerManager(t, 0)
	dir := t.TempDir()
	start := time.Now()
	h := startJoiningHub(t, dir, cluster.APIServers[0].URL, true,
		"--join-token="+joinToken, "--discovery-token-ca-cert-hash="+cluster.CAHash())
	t.Logf("from start to ready with a bootstrapped certificate: %v", time.Since(start).Round(time.Millisecond))

	u := whoAmI(t, h.Config("kubectl", false))
	if u.Username != "system:node:"+harness.NodeName || !contains(u.Groups, "system:nodes") {
		t.Fatalf("proxied as %+v, want system:node:%s in system:nodes", u, harness.NodeName)
	}
	c := storedCert(t, h, "yurthub-current.pem")
	if c.Subject.CommonName != "system:node:"+harness.NodeName {
		t.Fatalf("stored certificate is for %q", c.Subject.CommonName)
	}
	if _, err := x509.ParseCertificate(c.Raw); err != nil || c.PublicKeyAlgorithm != x509.ECDSA {
		t.Fatalf("key algorithm %v, want ECDSA", c.PublicKeyAlgorithm)
	}
	if v, _ := h.Metric("nodehub_client_certificate_expiry_seconds"); v < 3600 {
		t.Fatalf("nodehub_client_certificate_expiry_seconds %v", v)
	}
	// The bootstrap's exchanges (cluster-info, the CSR and its polls) are cloud bytes too.
	for _, d := range []string{"sent", "received"} {
		if v, _ := h.Metric(`nodehub_cloud_bytes_total{purpose="certs",direction="` + d + `"}`); v < 500 {
			t.Fatalf("nodehub_cloud_bytes_total certs %s: %v", d, v)
		}
	}
	h.Stop()

	h2 := startJoiningHub(t, dir, cluster.APIServers[0].URL, true)
	if u := whoAmI(t, h2.Config("kubectl", false)); u.Username != "system:node:"+harness.NodeName {
		t.Fatalf("after restart proxied as %q", u.Username)
	}
	if c2 := storedCert(t, h2, "yurthub-current.pem"); c2.SerialNumber.Cmp(c.SerialNumber) != 0 {
		t.Fatal("restart without a token bootstrapped again instead of using the stored certificate")
	}
}

// A CA hash that does not match the cloud's CA stops nodehub with a clear error.
func TestTokenBootstrapRefusesWrongCAHash(t *testing.T) {
	startControllerManager(t, 0)
	h := startJoiningHub(t, t.TempDir(), cluster.APIServers[0].URL, false,
		"--join-token="+joinToken, "--discovery-token-ca-cert-hash=sha256:"+strings.Repeat("ab", 32))
	if _, exited := h.Wait(30 * time.Second); !exited {
		t.Fatal("nodehub still running with a wrong CA hash")
	}
	log := h.Log()
	if !strings.Contains(log, "does not match --discovery-token-ca-cert-hash") || !strings.Contains(log, cluster.CAHash()) {
		t.Fatalf("no clear error in the log:\n%s", tailString(log, 2000))
	}
	if _, err := os.Stat(filepath.Join(h.RootDir, "pki", "yurthub-current.pem")); err == nil {
		t.Fatal("a certificate was stored despite the wrong CA hash")
	}
}

// With certificates living 40 s, the hub renews its client certificate at 70–90% of that and
// keeps proxying without a failed request, past the expiry of the first certificate.
func TestClientCertificateRotationFailsNoRequest(t *testing.T) {
	startControllerManager(t, 40*time.Second)
	h := startJoiningHub(t, t.TempDir(), cluster.APIServers[0].URL, true,
		"--join-token="+joinToken, "--discovery-token-ca-cert-hash="+cluster.CAHash())
	first := storedCert(t, h, "yurthub-current.pem")
	if life := time.Until(first.NotAfter); life > 45*time.Second {
		t.Fatalf("first certificate lives %v; the signing duration was not applied", life)
	}
	cs := h.Client("kubectl", true)
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if _, err := cs.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{}); err != nil {
					if ctx.Err() == nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
					}
				} else {
					ok.Add(1)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	// Run until well past the first certificate's expiry: requests then succeed only with the new one.
	time.Sleep(time.Until(first.NotAfter) + 3*time.Second)
	cancel()
	wg.Wait()
	now := storedCert(t, h, "yurthub-current.pem")
	if now.SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Fatal("the client certificate was not renewed")
	}
	if failed.Load() > 0 {
		t.Fatalf("%d of %d requests failed across the rotation; first: %v", failed.Load(), ok.Load()+failed.Load(), firstErr.Load())
	}
	if u := whoAmI(t, h.Config("kubectl", false)); u.Username != "system:node:"+harness.NodeName {
		t.Fatalf("after rotation proxied as %q", u.Username)
	}
	t.Logf("%d requests, none failed; certificate renewed %v after issue (lifetime %v)", ok.Load(),
		now.NotBefore.Sub(first.NotBefore).Round(time.Second), first.NotAfter.Sub(first.NotBefore.Add(5*time.Minute)).Round(time.Second))
}

// saSetup creates a namespace, ServiceAccounts allowed to read its ConfigMaps, and tokens.
func saSetup(t *testing.T, ns string, names ...string) map[string]string {
	t.Helper()
	ctx := context.Background()
	if err := cluster.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "read-configmaps", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}}}
	if _, err := cluster.Admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tokens := map[string]string{}
	for _, name := range names {
		if _, err := cluster.Admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "read-configmaps-" + name, Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}}
		if _, err := cluster.Admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		tr, err := cluster.Admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tokens[name] = tr.Status.Token
	}
	return tokens
}

// podConfig is a pod's in-cluster config pointed at the hub's secure port.
func podConfig(h *harness.Hub, token string) *rest.Config {
	return &rest.Config{Host: h.SecureURL, BearerToken: token, UserAgent: "coredns/e2e", QPS: 100, Burst: 100,
		TLSClientConfig: rest.TLSClientConfig{CAFile: cluster.PKI.CAFile}}
}

// waitServing waits until the secure port answers TLS with a certificate the cluster CA signed.
func waitServing(t *testing.T, h *harness.Hub) {
	t.Helper()
	waitServingOn(t, cluster, h)
}

// waitServingOn is waitServing for a hub of cluster c.
func waitServingOn(t *testing.T, c *harness.Cluster, h *harness.Hub) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(c.PKI.CA)
	eventually(t, 60*time.Second, "secure port serving with a CA-signed certificate", func() error {
		c, err := tls.Dial("tcp", strings.TrimPrefix(h.SecureURL, "https://"), &tls.Config{RootCAs: pool})
		if err != nil {
			return err
		}
		return c.Close()
	})
}

// secureRaw sends one request to the secure port with no token (and optionally a client
// certificate) and returns the status code and body.
func secureRaw(t *testing.T, h *harness.Hub, certs []tls.Certificate) (int, []byte) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(cluster.PKI.CA)
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: certs}}}
	defer cl.CloseIdleConnections()
	resp, err := cl.Get(h.SecureURL + "/api/v1/namespaces/default/configmaps")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// Pods reach the cloud through the secure port as their ServiceAccount; a request without a
// token gets 401, also when it presents the node's own client certificate.
func TestSecurePortServiceAccountsNotTheNode(t *testing.T) {
	startControllerManager(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cluster.ApproveServingCSRs(ctx)
	h := startHub(t)
	waitServing(t, h)
	tokens := saSetup(t, "identity-sa", "pod-a")

	u := whoAmI(t, podConfig(h, tokens["pod-a"]))
	if u.Username != "system:serviceaccount:identity-sa:pod-a" {
		t.Fatalf("secure port proxied as %q, want the ServiceAccount", u.Username)
	}
	cs := kubernetes.NewForConfigOrDie(podConfig(h, tokens["pod-a"]))
	if _, err := cs.CoreV1().ConfigMaps("identity-sa").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("the ServiceAccount's own permissions: %v", err)
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("a node read with a ServiceAccount token: err %v, want Forbidden (the node's identity must not be lent)", err)
	}
	nodeCert, err := tls.LoadX509KeyPair(cluster.NodeCert, cluster.NodeKey)
	if err != nil {
		t.Fatal(err)
	}
	for name, certs := range map[string][]tls.Certificate{"no credentials": nil, "the node's client certificate": {nodeCert}} {
		code, body := secureRaw(t, h, certs)
		var st metav1.Status
		if code != http.StatusUnauthorized || json.Unmarshal(body, &st) != nil || st.Kind != "Status" || st.Code != 401 {
			t.Fatalf("%s: %d %s, want a 401 Status", name, code, body)
		}
	}
	if v, _ := h.Metric("nodehub_unauthorized_requests_total{port=\"secure\"}"); v != 2 {
		t.Fatalf("nodehub_unauthorized_requests_total{port=secure} %v, want 2", v)
	}
	if v, _ := h.Metric("nodehub_serving_certificate_expiry_seconds"); v < 3600 {
		t.Fatalf("nodehub_serving_certificate_expiry_seconds %v", v)
	}
	// The serving certificate is for the names pods use.
	c := storedCert(t, h, "yurthub-server-current.pem")
	for _, n := range []string{"kubernetes", "kubernetes.default.svc.cluster.local"} {
		if !contains(c.DNSNames, n) {
			t.Fatalf("serving certificate SANs %v lack %s", c.DNSNames, n)
		}
	}
	// The plain port still lends the node's identity to local clients.
	if u := whoAmI(t, h.Config("kubectl", false)); u.Username != "system:node:"+harness.NodeName {
		t.Fatalf("plain port proxied as %q", u.Username)
	}
}

// Offline, a pod is answered only from what was cached for its own ServiceAccount, and a
// TokenRequest gets 503, not a fake token.
func TestOfflineServiceAccountIsolation(t *testing.T) {
	startControllerManager(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cluster.ApproveServingCSRs(ctx)
	relay, err := harness.NewRelay(strings.TrimPrefix(cluster.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Refuse()
	h := startHubServers(t, relay.URL())
	waitServing(t, h)
	tokens := saSetup(t, "identity-off", "pod-a", "pod-b")
	if _, err := cluster.Admin.CoreV1().ConfigMaps("identity-off").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "only-for-a"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	a := kubernetes.NewForConfigOrDie(podConfig(h, tokens["pod-a"]))
	b := kubernetes.NewForConfigOrDie(podConfig(h, tokens["pod-b"]))
	if l, err := a.CoreV1().ConfigMaps("identity-off").List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) == 0 {
		t.Fatalf("online list as pod-a: %v", err)
	}
	if _, err := a.CoreV1().ConfigMaps("identity-off").Get(ctx, "only-for-a", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	// kubelet refreshes the pod's token; the pod uses the new one online once.
	refreshed, err := cluster.Admin.CoreV1().ServiceAccounts("identity-off").CreateToken(ctx, "pod-a", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a2 := kubernetes.NewForConfigOrDie(podConfig(h, refreshed.Status.Token))
	if _, err := a2.CoreV1().ConfigMaps("identity-off").Get(ctx, "only-for-a", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	cacheWritten(t, h)

	relay.Refuse()
	eventually(t, 20*time.Second, "hub offline", func() error {
		if v, _ := h.Metric(`nodehub_server_healthy{server="` + relay.Addr + `"}`); v != 0 {
			return errorf("server healthy %v", v)
		}
		return nil
	})
	if l, err := a.CoreV1().ConfigMaps("identity-off").List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) == 0 {
		t.Fatalf("offline list as pod-a (its own cache): %v", err)
	}
	if l, err := a2.CoreV1().ConfigMaps("identity-off").List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) == 0 {
		t.Fatalf("offline list as pod-a with its refreshed token (the ServiceAccount's cache): %v", err)
	}
	if l, err := b.CoreV1().ConfigMaps("identity-off").List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatalf("offline list as pod-b answered with %d items pod-a cached", len(l.Items))
	}
	// A made-up token claiming to be pod-a (the cloud never accepted it) finds nothing either.
	enc := base64.RawURLEncoding.EncodeToString
	forged := enc([]byte(`{"alg":"RS256","kid":"x"}`)) + "." + enc([]byte(`{"sub":"system:serviceaccount:identity-off:pod-a"}`)) + "." + enc([]byte("nope"))
	if l, err := kubernetes.NewForConfigOrDie(podConfig(h, forged)).CoreV1().ConfigMaps("identity-off").List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatalf("offline list with a forged pod-a token answered with %d items", len(l.Items))
	}
	if _, err := b.CoreV1().ConfigMaps("identity-off").Get(ctx, "only-for-a", metav1.GetOptions{}); err == nil {
		t.Fatal("offline get as pod-b answered with what pod-a cached")
	}
	// A TokenRequest offline: 503, never a made-up token.
	_, err = a.CoreV1().ServiceAccounts("identity-off").CreateToken(ctx, "pod-a", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("offline TokenRequest: err %v, want 503", err)
	}
	// No token on the secure port is refused offline too.
	if code, _ := secureRaw(t, h, nil); code != http.StatusUnauthorized {
		t.Fatalf("offline, no token: %d, want 401", code)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// A node whose certificate expired while it was down, and that has no token any more, is not
// ready; POST /v1/token with a valid token makes it bootstrap again.
func TestExpiredCertificateBootstrapsAgainWithPostedToken(t *testing.T) {
	startControllerManager(t, 20*time.Second)
	dir := t.TempDir()
	h := startJoiningHub(t, dir, cluster.APIServers[0].URL, true,
		"--join-token="+joinToken, "--discovery-token-ca-cert-hash="+cluster.CAHash())
	old := storedCert(t, h, "yurthub-current.pem")
	h.Stop()
	time.Sleep(time.Until(old.NotAfter) + time.Second)

	h2 := startJoiningHub(t, dir, cluster.APIServers[0].URL, false)
	if err := h2.WaitHTTP(context.Background(), "/v1/healthz", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	// The hub finds its certificate expired and no token at its start, in its time: wait for the
	// verdict rather than sleep.
	eventually(t, 30*time.Second, "readyz with an expired certificate and no token", func() error {
		if code, body, _ := h2.Get("/v1/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "join token") {
			return errorf("%d %q", code, body)
		}
		return nil
	})
	for _, tc := range []struct {
		body string
		code int
	}{{`{"jointoken":"bad"}`, http.StatusBadRequest}, {`{"jointoken":"` + joinToken + `"}`, http.StatusOK}} {
		resp, err := http.Post(h2.HubURL+"/v1/token", "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Fatalf("POST /v1/token %s: %d, want %d", tc.body, resp.StatusCode, tc.code)
		}
	}
	if err := h2.WaitHTTP(context.Background(), "/v1/readyz", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if c := storedCert(t, h2, "yurthub-current.pem"); c.SerialNumber.Cmp(old.SerialNumber) == 0 || !time.Now().Before(c.NotAfter) {
		t.Fatal("no new certificate after the token was posted")
	}
	// The server turns healthy again after --heartbeat-healthy-threshold heartbeats.
	cs := h2.Client("kubectl", false)
	eventually(t, 60*time.Second, "proxying as the node again", func() error {
		r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if r.Status.UserInfo.Username != "system:node:"+harness.NodeName {
			return errorf("proxied as %q", r.Status.UserInfo.Username)
		}
		return nil
	})
}

// --bootstrap-file: a bootstrap kubeconfig (CA and token) instead of --join-token.
func TestBootstrapKubeconfigFile(t *testing.T) {
	startControllerManager(t, 0)
	ca, err := os.ReadFile(cluster.PKI.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kc := filepath.Join(dir, "bootstrap-hub.conf")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters:
- name: cloud
  cluster:
    server: `+cluster.APIServers[0].URL+`
    certificate-authority-data: `+base64.StdEncoding.EncodeToString(ca)+`
users:
- name: bootstrap
  user:
    token: `+joinToken+`
contexts:
- name: bootstrap
  context: {cluster: cloud, user: bootstrap}
current-context: bootstrap
`), 0o600); err != nil {
		t.Fatal(err)
	}
	h := startJoiningHub(t, dir, cluster.APIServers[0].URL, true, "--bootstrap-file="+kc)
	if u := whoAmI(t, h.Config("kubectl", false)); u.Username != "system:node:"+harness.NodeName {
		t.Fatalf("proxied as %q", u.Username)
	}
}
