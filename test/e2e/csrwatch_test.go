package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/e2e/harness"
)

// A serving CSR approved only 20 s after it was created is issued to the hub soon after the
// approval, and the hub waited for it with a watch: the apiserver saw no repeated GETs of CSRs
// (polling would have sent one every 0.5–5 s).
func TestServingCSRWatchedUntilApproved(t *testing.T) {
	startControllerManager(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now().Add(-time.Second).Truncate(time.Second)
	// One server: the apiserver whose metrics are read is the one the hub asks.
	h := startHubServers(t, cluster.APIServers[0].URL)

	var csr *certificatesv1.CertificateSigningRequest
	eventually(t, 60*time.Second, "the hub's serving CSR created", func() error {
		list, err := cluster.Admin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for i := range list.Items {
			c := &list.Items[i]
			if c.Spec.SignerName == certificatesv1.KubeletServingSignerName && c.Spec.Username == "system:node:"+harness.NodeName &&
				!c.CreationTimestamp.Time.Before(start) && len(c.Status.Conditions) == 0 {
				csr = c
				return nil
			}
		}
		return fmt.Errorf("none of %d CSRs", len(list.Items))
	})
	before := readAPIServerCounts(t, ctx, "certificatesigningrequests")

	// The scenario: nobody approves it for 20 s.
	eventually(t, 60*time.Second, "the CSR 20 s old", func() error {
		if age := time.Since(csr.CreationTimestamp.Time); age < 20*time.Second {
			return fmt.Errorf("%v old", age)
		}
		return nil
	})
	mid := readAPIServerCounts(t, ctx, "certificatesigningrequests")
	if gets := mid.done["GET"] - before.done["GET"]; gets > 0 {
		t.Fatalf("%v GETs of CSRs while the serving CSR waited for approval, want none (watched)", gets)
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "E2E", Message: "approved late by the e2e test"})
	if _, err := cluster.Admin.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	approved := time.Now()
	eventually(t, 60*time.Second, "the serving certificate issued to the hub", func() error {
		if v, _ := h.Metric("nodehub_serving_certificate_expiry_seconds"); v < 3600 {
			return fmt.Errorf("nodehub_serving_certificate_expiry_seconds %v", v)
		}
		return nil
	})
	t.Logf("serving certificate in use %v after the approval", time.Since(approved).Round(time.Millisecond))
	waitServing(t, h)
	c := storedCert(t, h, "yurthub-server-current.pem")
	if !slices.Contains(c.DNSNames, "kubernetes") {
		t.Fatalf("serving certificate SANs %v", c.DNSNames)
	}
	after := readAPIServerCounts(t, ctx, "certificatesigningrequests")
	if gets := after.done["GET"] - before.done["GET"]; gets > 0 {
		t.Fatalf("%v GETs of CSRs in all, want none: the watch brought the certificate", gets)
	}
}

// A bootstrap token may watch CSRs (system:node-bootstrapper): the joining hub's client CSR is
// watched, not polled.
func TestTokenBootstrapWatchesItsCSR(t *testing.T) {
	startControllerManager(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := readAPIServerCounts(t, ctx, "certificatesigningrequests")
	h := startJoiningHub(t, t.TempDir(), cluster.APIServers[0].URL, true,
		"--join-token="+joinToken, "--discovery-token-ca-cert-hash="+cluster.CAHash())
	if u := whoAmI(t, h.Config("kubectl", false)); u.Username != "system:node:"+harness.NodeName {
		t.Fatalf("proxied as %q", u.Username)
	}
	after := readAPIServerCounts(t, ctx, "certificatesigningrequests")
	if gets := after.done["GET"] - before.done["GET"]; gets > 0 {
		t.Fatalf("%v GETs of CSRs during the bootstrap, want none (watched)", gets)
	}
	if creates := after.done["POST"] - before.done["POST"]; creates < 1 {
		t.Fatalf("%v CSRs created", creates)
	}
}
