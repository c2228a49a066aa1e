package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/e2e/harness"
)

// benchSecure times a pod's request (a ServiceAccount token, GET of one ConfigMap) through the
// hub's secure port and directly, interleaved, and the hub's CPU per request: what the secure
// port (TLS termination, bearer check, a TLS hop to the cloud) costs a pod.
func benchSecure(e *env, o options) error {
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	kcm, err := e.c.StartControllerManager(ctx, harness.ControllerOptions{})
	if err != nil {
		return err
	}
	defer kcm.Stop()
	go e.c.ApproveServingCSRs(ctx)
	token, err := benchServiceAccount(ctx, e.c)
	if err != nil {
		return err
	}
	h, err := e.startHub()
	if err != nil {
		return err
	}
	defer h.Stop()
	pool := x509.NewCertPool()
	pool.AddCert(e.c.PKI.CA)
	tlsCfg := &tls.Config{RootCAs: pool}
	if err := waitSecure(h, tlsCfg); err != nil {
		return err
	}
	client := func() *http.Client {
		return &http.Client{Transport: &bearer{token: token, rt: &http.Transport{ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 4, TLSClientConfig: tlsCfg.Clone()}}}
	}
	viaHub, direct := client(), client()
	path := "/api/v1/namespaces/default/configmaps/bench-secure"
	var hubT, dirT []time.Duration
	cpu0, err := cpuTime(h.Pid())
	if err != nil {
		return err
	}
	for i := 0; i < o.rounds+20; i++ {
		dh, err := timeGetAsUA(viaHub, h.SecureURL+path, "application/json", "bench-pod/v1")
		if err != nil {
			return err
		}
		dd, err := timeGetAsUA(direct, e.c.APIServers[0].URL+path, "application/json", "bench-pod/v1")
		if err != nil {
			return err
		}
		if i >= 20 {
			hubT, dirT = append(hubT, dh), append(dirT, dd)
		}
	}
	cpu1, err := cpuTime(h.Pid())
	if err != nil {
		return err
	}
	mh, md := pct(hubT, 50), pct(dirT, 50)
	fmt.Printf("\n## secure port, %d interleaved rounds, a ServiceAccount's GET of one ConfigMap (JSON, HTTP/2)\n", o.rounds)
	fmt.Println("request\tpath\tmedian\tp99")
	fmt.Printf("GET configmap\tsecure port\t%v\t%v\n", mh, pct(hubT, 99))
	fmt.Printf("GET configmap\tdirect\t%v\t%v\n", md, pct(dirT, 99))
	fmt.Printf("GET configmap\tratio_median_hub_over_direct\t%.2f\n", float64(mh)/float64(md))
	fmt.Printf("GET configmap\thub_cpu_per_request\t%v\n", ((cpu1 - cpu0) / time.Duration(o.rounds+20)).Round(time.Microsecond))
	return nil
}

// benchServiceAccount makes a ServiceAccount that may read ConfigMaps in default, one ConfigMap,
// and returns a token for it.
func benchServiceAccount(ctx context.Context, c *harness.Cluster) (string, error) {
	ns := "default"
	if _, err := c.Admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bench-secure"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	if _, err := c.Admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "bench-pod"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "bench-read-configmaps", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}}}
	if _, err := c.Admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "bench-read-configmaps", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "bench-pod", Namespace: ns}}}
	if _, err := c.Admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	tr, err := c.Admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "bench-pod", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	rt    http.RoundTripper
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}

// waitSecure waits until h's secure port serves a certificate tlsCfg trusts (kube-controller-manager
// signed it and ApproveServingCSRs approved it).
func waitSecure(h *harness.Hub, tlsCfg *tls.Config) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := tls.Dial("tcp", h.SecureURL[len("https://"):], tlsCfg)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("secure port: no serving certificate within 60s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
