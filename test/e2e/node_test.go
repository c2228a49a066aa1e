package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/e2e/harness"
)

// startHubInNetns runs nodehub inside ns (through wrap), reaching the apiserver over a bridge
// into the namespace; the returned hub's HubURL and ProxyURL are bridged out to the host's
// loopback (a request through ProxyURL arrives at the hub over the namespace's loopback).
func startHubInNetns(t *testing.T, ns *netns, wrap string, args ...string) *harness.Hub {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	api := intoNetns(t, ns, strings.TrimPrefix(cluster.APIServers[0].URL, "https://"))
	h, err := cluster.StartHub(ctx, harness.HubOptions{Bin: nodehub, Dir: t.TempDir(), Servers: "https://" + api,
		Args: args, Emulator: wrap, NoWait: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Stop()
		if t.Failed() {
			t.Logf("nodehub log:\n%s", tailString(h.Log(), 6000))
		}
	})
	h.HubURL = "http://" + outOfNetns(t, ns, "127.0.0.1:"+strconv.Itoa(h.HubPort))
	h.ProxyURL = "http://" + outOfNetns(t, ns, "127.0.0.1:"+strconv.Itoa(h.ProxyPort))
	if err := h.WaitHTTP(ctx, "/v1/readyz", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return h
}

// rawWhoAmI posts a SelfSubjectReview through the client and returns the HTTP code and the user the
// apiserver saw.
func rawWhoAmI(t *testing.T, cl *http.Client, base, token string) (int, string) {
	t.Helper()
	body := `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`
	req, _ := http.NewRequest(http.MethodPost, base+"/apis/authentication.k8s.io/v1/selfsubjectreviews", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("selfsubjectreview via %s: %v", base, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out struct {
		Status struct {
			UserInfo struct {
				Username string `json:"username"`
			} `json:"userInfo"`
		} `json:"status"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal(b, &out)
	if out.Status.UserInfo.Username == "" {
		return resp.StatusCode, out.Message
	}
	return resp.StatusCode, out.Status.UserInfo.Username
}

// TestDummyIfPodsReachTheHubInNetns: in a network namespace of its own, nodehub makes hub-dummy0
// with 169.254.2.1 through rtnetlink and serves its proxy port there; a pod-like client in that
// namespace reaches the hub at 169.254.2.1 with its ServiceAccount token (forwarded as is: the
// apiserver sees the ServiceAccount) and gets 401 without one, while loopback clients keep the
// node's identity.
func TestDummyIfPodsReachTheHubInNetns(t *testing.T) {
	startControllerManager(t, 0) // signs the secure port's serving certificate
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cluster.ApproveServingCSRs(ctx)
	ns := newNetns(t)
	h := startHubInNetns(t, ns, ns.wrapper(t, ""), "--enable-dummy-if=true")

	ifc, addrs, err := ns.Interface("hub-dummy0")
	if err != nil {
		t.Fatalf("hub-dummy0 in the test namespace: %v", err)
	}
	has := false
	for _, a := range addrs {
		has = has || strings.HasPrefix(a.String(), "169.254.2.1/")
	}
	if !has || ifc.Flags&(1<<0) == 0 { // net.FlagUp
		t.Fatalf("hub-dummy0: flags %v addrs %v, want up with 169.254.2.1", ifc.Flags, addrs)
	}
	if _, body, _ := h.Get("/v1/readyz"); strings.Contains(body, "not in place") {
		t.Fatalf("readyz reports a problem with the link: %s", body)
	}
	if v, _ := h.Metric(`nodehub_dummy_if_ensures_total{result="ok"}`); v < 1 {
		t.Fatalf("nodehub_dummy_if_ensures_total{result=\"ok\"} = %v", v)
	}

	tok, err := cluster.Admin.CoreV1().ServiceAccounts("default").CreateToken(context.Background(), "default",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: ns.Dial}}
	podURL := "http://169.254.2.1:" + strconv.Itoa(h.ProxyPort)
	if code, user := rawWhoAmI(t, pod, podURL, tok.Status.Token); code != http.StatusCreated || user != "system:serviceaccount:default:default" {
		t.Fatalf("pod with a token at %s: %d %q, want 201 as system:serviceaccount:default:default", podURL, code, user)
	}
	if code, msg := rawWhoAmI(t, pod, podURL, ""); code != http.StatusUnauthorized || !strings.Contains(msg, "bearer token") {
		t.Fatalf("pod without a token at %s: %d %q, want the hub's 401", podURL, code, msg)
	}
	if code, user := rawWhoAmI(t, http.DefaultClient, h.ProxyURL, ""); code != http.StatusCreated || user != "system:node:"+harness.NodeName {
		t.Fatalf("loopback client: %d %q, want 201 as the node", code, user)
	}

	// The secure port on the link's address, as the filters point pods at it: TLS with a
	// certificate the cluster CA signed for 169.254.2.1; the token goes through, no token is 401.
	roots := x509.NewCertPool()
	roots.AddCert(cluster.PKI.CA)
	securePod := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: ns.Dial, TLSClientConfig: &tls.Config{RootCAs: roots}}}
	secureURL := "https://169.254.2.1:" + strconv.Itoa(h.SecurePort)
	eventually(t, 60*time.Second, "secure port on 169.254.2.1 with its serving certificate", func() error {
		c, err := ns.Dial(ctx, "tcp", strings.TrimPrefix(secureURL, "https://"))
		if err != nil {
			return err
		}
		tc := tls.Client(c, &tls.Config{RootCAs: roots, ServerName: "169.254.2.1"})
		defer tc.Close()
		return tc.Handshake()
	})
	if code, user := rawWhoAmI(t, securePod, secureURL, tok.Status.Token); code != http.StatusCreated || user != "system:serviceaccount:default:default" {
		t.Fatalf("pod with a token at %s: %d %q, want 201 as system:serviceaccount:default:default", secureURL, code, user)
	}
	if code, _ := rawWhoAmI(t, securePod, secureURL, ""); code != http.StatusUnauthorized {
		t.Fatalf("pod without a token at %s: %d, want 401", secureURL, code)
	}

	// Stopped without --cleanup-dummy-if, the link stays (as YurtHub keeps it).
	h.Stop()
	if _, _, err := ns.Interface("hub-dummy0"); err != nil {
		t.Fatalf("hub-dummy0 gone after a stop without --cleanup-dummy-if: %v", err)
	}
}

// TestDummyIfCleanupOnStopAndWideProxyPort: with --cleanup-dummy-if the link goes when nodehub
// stops. The proxy port here is bound to 0.0.0.0 (it then covers the link's address itself):
// requests that arrive on the link's address still need a token (401), those on loopback keep
// the node's identity.
func TestDummyIfCleanupOnStopAndWideProxyPort(t *testing.T) {
	ns := newNetns(t)
	h := startHubInNetns(t, ns, ns.wrapper(t, ""), "--enable-dummy-if=true", "--cleanup-dummy-if",
		"--dummy-if-ip=169.254.2.7", "--dummy-if-name=nodehub0", "--bind-proxy-address=0.0.0.0", "--insecure-allow-remote-proxy")
	eventually(t, 60*time.Second, "nodehub0 with 169.254.2.7", func() error {
		_, addrs, err := ns.Interface("nodehub0")
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if strings.HasPrefix(a.String(), "169.254.2.7/") {
				return nil
			}
		}
		return fmt.Errorf("addresses %v", addrs)
	})
	pod := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: ns.Dial}}
	if code, msg := rawWhoAmI(t, pod, "http://169.254.2.7:"+strconv.Itoa(h.ProxyPort), ""); code != http.StatusUnauthorized || !strings.Contains(msg, "bearer token") {
		t.Fatalf("no token on the link's address of a port bound to 0.0.0.0: %d %q, want 401", code, msg)
	}
	if code, user := rawWhoAmI(t, http.DefaultClient, h.ProxyURL, ""); code != http.StatusCreated || user != "system:node:"+harness.NodeName {
		t.Fatalf("loopback client: %d %q, want 201 as the node", code, user)
	}
	h.Stop()
	if _, _, err := ns.Interface("nodehub0"); err == nil {
		t.Fatal("nodehub0 still there after a stop with --cleanup-dummy-if")
	}
}

// TestDummyIfWithoutNetAdminKeepsProxying: nodehub without CAP_NET_ADMIN (dropped from its
// bounding set with setpriv) cannot make the link; it says so in /v1/readyz (still 200) and in
// the metric, and keeps proxying.
func TestDummyIfWithoutNetAdminKeepsProxying(t *testing.T) {
	ns := newNetns(t)
	h := startHubInNetns(t, ns, ns.wrapper(t, "setpriv --bounding-set=-net_admin"), "--enable-dummy-if=true")
	code, body, err := h.Get("/v1/readyz")
	if err != nil || code != http.StatusOK || !strings.Contains(body, "hub-dummy0 not in place") || !strings.Contains(body, "CAP_NET_ADMIN") {
		t.Fatalf("readyz: %d %q %v; want 200 naming the link and CAP_NET_ADMIN", code, body, err)
	}
	if _, _, err := ns.Interface("hub-dummy0"); err == nil {
		t.Fatal("hub-dummy0 exists although nodehub had no CAP_NET_ADMIN")
	}
	if v, _ := h.Metric(`nodehub_dummy_if_ensures_total{result="error"}`); v < 1 {
		t.Fatalf("nodehub_dummy_if_ensures_total{result=\"error\"} = %v", v)
	}
	if code, user := rawWhoAmI(t, http.DefaultClient, h.ProxyURL, ""); code != http.StatusCreated || user != "system:node:"+harness.NodeName {
		t.Fatalf("proxying without the link: %d %q", code, user)
	}
	node, err := h.Client("kubelet/v1.34", false).CoreV1().Nodes().Get(context.Background(), harness.NodeName, metav1.GetOptions{})
	if err != nil || node.Name != harness.NodeName {
		t.Fatalf("get node through the hub: %v", err)
	}
	if n := strings.Count(h.Log(), "hub address not in place"); n != 1 {
		t.Fatalf("the missing capability was logged %d times, want once", n)
	}
}
