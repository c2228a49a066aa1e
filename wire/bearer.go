package wire

import "strings"

// BearerToken returns the bearer token of an Authorization header exactly as the kube-apiserver
// reads it (k8s.io/apiserver's bearertoken authenticator): the header without the white space
// around it, cut at single spaces; the first part is "bearer" in any case and the second, which
// must not be empty, is the token ("Bearer tok extra" is "tok"). Anything else is no bearer
// token: the apiserver serves it as anonymous, and so the hub has no identity for it.
// Tabs, two spaces after "Bearer", or "Bearer" alone are no bearer token.
//
// This is the hub's one reading of the header: whether a request brings a bearer token (the
// secure port, requests that did not arrive over loopback) and whose token it is
// (hub/identity) both ask it, so the hub and the apiserver never disagree on a header.
func BearerToken(auth string) (string, bool) {
	auth = strings.TrimSpace(auth)
	scheme, rest, ok := strings.Cut(auth, " ")
	if !ok || strings.ToLower(scheme) != "bearer" {
		return "", false
	}
	token, _, _ := strings.Cut(rest, " ")
	return token, token != ""
}
