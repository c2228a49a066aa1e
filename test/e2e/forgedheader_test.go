package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/e2e/harness"
)

// anonymousMayRead lets system:anonymous get the ConfigMap public of ns: a resource path a header
// the apiserver serves as anonymous gets a 2xx on.
func anonymousMayRead(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "anonymous-public", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"public"}}}}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "anonymous-public", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "system:anonymous"}}}
	if _, err := cluster.Admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := cluster.Admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"public": "for anyone", "password": "hunter2"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": data}}
		if _, err := cluster.Admin.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// tokenWithoutRBAC is the token of a new ServiceAccount of ns bound to nothing.
func tokenWithoutRBAC(t *testing.T, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := cluster.Admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tr, err := cluster.Admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// Issue 28, item 2: "Authorization: Bearer  <token>" (two spaces) is anonymous to the apiserver,
// which answers /version and what anonymous may read with a 2xx; the hub must not take that for
// the ServiceAccount the token names. A client with a ServiceAccount token bound to nothing sends
// such headers (the other ServiceAccount's real token, a forged one claiming it, a tab) with
// reads online; offline it reads nothing of the other ServiceAccount's cache and creates no
// event, while that ServiceAccount's own token (single space) still reads its cache. On the
// secure port such a header is no bearer token: 401, online and offline.
func TestTwoSpaceBearerLearnsNoServiceAccount(t *testing.T) {
	startControllerManager(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cluster.ApproveServingCSRs(ctx)
	const ns = "forged-header"
	relay, err := harness.NewRelay(strings.TrimPrefix(cluster.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Refuse()
	h := startHubServers(t, relay.URL(), "--heartbeat-timeout-seconds=1")
	waitServing(t, h)
	victim := saSetup(t, ns, "victim")["victim"]
	anonymousMayRead(t, ns)
	attacker := tokenWithoutRBAC(t, ns, "attacker")
	cl := &http.Client{Timeout: 20 * time.Second}
	defer cl.CloseIdleConnections()
	cm := h.ProxyURL + "/api/v1/namespaces/" + ns + "/configmaps/"
	as := func(auth string) map[string]string {
		return map[string]string{"Authorization": auth, "User-Agent": "coredns/1.0"} // a component the hub caches
	}

	// The victim reads its password through the hub (loopback, its own token): cached as its
	// ServiceAccount's.
	if code, b := raw(t, cl, http.MethodGet, cm+"password", nil, as("Bearer "+victim)); code != http.StatusOK || !bytes.Contains(b, []byte("hunter2")) {
		t.Fatalf("the victim's online read: %d %s", code, b)
	}
	// What one review costs (the hub's question per new token): its body each way.
	review := `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`
	hdr := as("Bearer " + victim)
	hdr["Content-Type"] = "application/json"
	if code, b := raw(t, cl, http.MethodPost, h.ProxyURL+"/apis/authentication.k8s.io/v1/selfsubjectreviews", strings.NewReader(review), hdr); code != http.StatusCreated {
		t.Fatalf("a review as the victim: %d %s", code, b)
	} else {
		t.Logf("one SelfSubjectReview: %d body bytes up, %d down", len(review), len(b))
	}
	if code, b := raw(t, cl, http.MethodGet, h.ProxyURL+"/version", nil, as("Bearer "+attacker)); code != http.StatusOK {
		t.Fatalf("the attacker's own token, /version: %d %s", code, b)
	}
	forged := forgedJWT("system:serviceaccount:" + ns + ":victim")
	attacks := []string{"Bearer  " + victim, "Bearer  " + forged, "Bearer\t" + forged, "Bearer  " + forged + " " + attacker}
	for _, auth := range attacks {
		for _, path := range []string{h.ProxyURL + "/version", cm + "public"} { // anonymous: 2xx
			if code, b := raw(t, cl, http.MethodGet, path, nil, as(auth)); code != http.StatusOK {
				t.Fatalf("online, %.20q GET %s: %d %s; want the apiserver's anonymous 200", auth, path, code, b)
			}
		}
		if code, b := raw(t, cl, http.MethodGet, cm+"password", nil, as(auth)); code == http.StatusOK {
			t.Fatalf("online, %.20q read the password: %s", auth, b)
		}
		if code, _ := secureAs(t, h, auth); code != http.StatusUnauthorized {
			t.Errorf("online, secure port, %.20q: %d, want 401", auth, code)
		}
	}
	cacheWritten(t, h)

	relay.Refuse()
	eventually(t, 20*time.Second, "hub offline", func() error {
		if v, _ := h.Metric(`nodehub_server_healthy{server="` + relay.Addr + `"}`); v != 0 {
			return errorf("server healthy %v", v)
		}
		return nil
	})
	for _, auth := range attacks {
		if code, b := raw(t, cl, http.MethodGet, cm+"password", nil, as(auth)); code == http.StatusOK || bytes.Contains(b, []byte("hunter2")) {
			t.Errorf("offline, %.20q read the victim's cached password: %d %s", auth, code, b)
		}
		ev := `{"apiVersion":"v1","kind":"Event","metadata":{"name":"forged","namespace":"` + ns + `"},"involvedObject":{"kind":"Pod","name":"x","namespace":"` + ns + `"},"reason":"Forged"}`
		hdr := as(auth)
		hdr["Content-Type"] = "application/json"
		if code, b := raw(t, cl, http.MethodPost, h.ProxyURL+"/api/v1/namespaces/"+ns+"/events", strings.NewReader(ev), hdr); code != http.StatusServiceUnavailable {
			t.Errorf("offline, %.20q created an event: %d %.300s, want 503", auth, code, b)
		}
		if code, _ := secureAs(t, h, auth); code != http.StatusUnauthorized {
			t.Errorf("offline, secure port, %.20q: %d, want 401", auth, code)
		}
	}
	for _, auth := range []string{"Bearer " + victim, "bearer " + victim} {
		if code, b := raw(t, cl, http.MethodGet, cm+"password", nil, as(auth)); code != http.StatusOK || !bytes.Contains(b, []byte("hunter2")) {
			t.Errorf("offline, the victim's own token as %.8q: %d %s", auth, code, b)
		}
	}
}

// secureAs sends one GET to the secure port with the Authorization header auth.
func secureAs(t *testing.T, h *harness.Hub, auth string) (int, []byte) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(cluster.PKI.CA)
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer cl.CloseIdleConnections()
	return raw(t, cl, http.MethodGet, h.SecureURL+"/version", nil, map[string]string{"Authorization": auth})
}
