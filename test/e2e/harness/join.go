package harness

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CAHash is the kubeadm pin of the cluster CA (--discovery-token-ca-cert-hash).
func (c *Cluster) CAHash() string {
	sum := sha256.Sum256(c.PKI.CA.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// SetupJoin prepares what kubeadm init sets up for nodes to join with a bootstrap token: the
// token secret (id.secret) in kube-system, the kube-public/cluster-info ConfigMap readable
// anonymously, and the RBAC that lets bootstrappers create node CSRs, auto-approves them and
// the nodes' renewals. It waits until the bootstrap signer (kube-controller-manager) has
// signed cluster-info for the token.
func (c *Cluster) SetupJoin(ctx context.Context, id, secret string) error {
	const group = "system:bootstrappers:kubeadm:default-node-token"
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: "kube-system"},
		Type:       corev1.SecretType("bootstrap.kubernetes.io/token"),
		StringData: map[string]string{"token-id": id, "token-secret": secret, "usage-bootstrap-authentication": "true",
			"usage-bootstrap-signing": "true", "auth-extra-groups": group},
	}
	if _, err := c.Admin.CoreV1().Secrets("kube-system").Create(ctx, sec, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if err := c.EnsureNamespace(ctx, "kube-public"); err != nil {
		return err
	}
	ca, err := os.ReadFile(c.PKI.CAFile)
	if err != nil {
		return err
	}
	kubeconfig := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n    certificate-authority-data: %s\n    server: %s\ncontexts: []\nusers: []\n",
		b64(ca), c.APIServers[0].URL)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cluster-info", Namespace: "kube-public"}, Data: map[string]string{"kubeconfig": kubeconfig}}
	if _, err := c.Admin.CoreV1().ConfigMaps("kube-public").Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:bootstrap-signer-clusterinfo", Namespace: "kube-public"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"cluster-info"}}}}
	if _, err := c.Admin.RbacV1().Roles("kube-public").Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:bootstrap-signer-clusterinfo", Namespace: "kube-public"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "system:anonymous"}}}
	if _, err := c.Admin.RbacV1().RoleBindings("kube-public").Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for _, b := range []struct{ name, group, role string }{
		{"kubeadm:kubelet-bootstrap", group, "system:node-bootstrapper"},
		{"kubeadm:node-autoapprove-bootstrap", group, "system:certificates.k8s.io:certificatesigningrequests:nodeclient"},
		{"kubeadm:node-autoapprove-certificate-rotation", "system:nodes", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"},
	} {
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: b.name},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: b.role},
			Subjects: []rbacv1.Subject{{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: b.group}}}
		if _, err := c.Admin.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		cm, err := c.Admin.CoreV1().ConfigMaps("kube-public").Get(ctx, "cluster-info", metav1.GetOptions{})
		if err == nil && cm.Data["jws-kubeconfig-"+id] != "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster-info not signed for token %s within 60s (bootstrapsigner running?): %v", id, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ApproveServingCSRs approves, until ctx ends, every pending kubelet-serving CSR of the node,
// as the cluster's approver (OpenYurt's yurt-manager, or an admin) would.
func (c *Cluster) ApproveServingCSRs(ctx context.Context) {
	for ctx.Err() == nil {
		_, _ = c.ApprovePendingServingCSRs(ctx, "system:node:"+NodeName)
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// ApprovePendingServingCSRs approves the kubelet-serving CSRs of the named users (system:node:
// and the node's name) that wait for a decision now, as the cluster's approver would, and says
// how many it approved.
func (c *Cluster) ApprovePendingServingCSRs(ctx context.Context, users ...string) (int, error) {
	list, err := c.Admin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for i := range list.Items {
		csr := &list.Items[i]
		if csr.Spec.SignerName != certificatesv1.KubeletServingSignerName || !slices.Contains(users, csr.Spec.Username) || len(csr.Status.Conditions) > 0 {
			continue
		}
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "E2E", Message: "approved by the e2e test"})
		if _, err := c.Admin.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
