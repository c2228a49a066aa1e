package harness

import (
	"context"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CoreDNSToken creates ServiceAccount ns/coredns with what CoreDNS's kubernetes plugin reads (list
// and watch Services, EndpointSlices, Namespaces; the system:coredns ClusterRole of a kubeadm
// cluster, less pods) and returns a token for it, as its pod would have. ns must exist.
func (c *Cluster) CoreDNSToken(ctx context.Context, ns string) (string, error) {
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-coredns"}, Rules: []rbacv1.PolicyRule{
		{Verbs: []string{"list", "watch"}, APIGroups: []string{""}, Resources: []string{"services", "namespaces"}},
		{Verbs: []string{"list", "watch"}, APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}},
	}}
	if _, err := c.Admin.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	if _, err := c.Admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "coredns"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-coredns-" + ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: cr.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "coredns", Namespace: ns}}}
	if _, err := c.Admin.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	tr, err := c.Admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "coredns", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}
