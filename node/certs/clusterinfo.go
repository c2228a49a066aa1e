package certs

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// ErrCAHash is returned when the cluster CA matches none of the pinned hashes.
var ErrCAHash = errors.New("certs: cluster CA does not match --discovery-token-ca-cert-hash")

// ErrJWS is returned when cluster-info carries no valid signature for the join token.
var ErrJWS = errors.New("certs: cluster-info is not signed for this join token")

// ParseToken splits a bootstrap token "abcdef.0123456789abcdef" ([a-z0-9]{6}.[a-z0-9]{16}) into
// id and secret.
func ParseToken(tok string) (id, secret string, err error) {
	id, secret, ok := strings.Cut(tok, ".")
	if !ok || len(id) != 6 || len(secret) != 16 || !lowerAlnum(id) || !lowerAlnum(secret) {
		return "", "", errors.New("a join token looks like [a-z0-9]{6}.[a-z0-9]{16}")
	}
	return id, secret, nil
}

func lowerAlnum(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// ParseCAHash checks one kubeadm-style pin "sha256:<64 hex>" and returns the hex, lower-cased.
func ParseCAHash(h string) (string, error) {
	v, ok := strings.CutPrefix(strings.TrimSpace(h), "sha256:")
	if !ok {
		return "", fmt.Errorf("%q: want sha256:<hex of the CA's public key info>", h)
	}
	v = strings.ToLower(v)
	if b, err := hex.DecodeString(v); err != nil || len(b) != sha256.Size {
		return "", fmt.Errorf("%q: want 64 hex digits after sha256:", h)
	}
	return v, nil
}

// CAHash is the kubeadm pin of a certificate: sha256 of its SubjectPublicKeyInfo.
func CAHash(c *x509.Certificate) string {
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Discovery says how the cluster CA is learnt from the cloud with a join token.
type Discovery struct {
	Token string
	// CAHashes are pins as ParseCAHash returns them; one must match unless SkipCAVerification.
	CAHashes           []string
	SkipCAVerification bool
	Timeout            time.Duration

	count OnBytes // the Manager's ManagerConfig.OnBytes
}

// clusterInfo is the part of the kube-public/cluster-info ConfigMap discovery reads.
type clusterInfo struct {
	Data map[string]string `json:"data"`
}

// FetchCA reads kube-public/cluster-info from server (https://host:port) anonymously, checks
// the JWS signature the bootstrap signer made for the token (proof that the server knows the
// token's secret), checks the CA against the pins, then reads cluster-info again over a
// connection verified with that CA and checks it is the same. It returns the CA PEM: of a bundle,
// only the certificates a pin matches (all of them with SkipCAVerification).
func (d Discovery) FetchCA(ctx context.Context, server string) ([]byte, error) {
	id, secret, err := ParseToken(d.Token)
	if err != nil {
		return nil, fmt.Errorf("certs: join token: %w", err)
	}
	kubeconfig, err := d.signedKubeconfig(ctx, server, id, secret)
	if err != nil {
		return nil, err
	}
	caPEM, err := caFromKubeconfig([]byte(kubeconfig))
	if err != nil {
		return nil, err
	}
	certs, err := parseCerts(caPEM)
	if err != nil {
		return nil, err
	}
	if !d.SkipCAVerification {
		if certs, caPEM, err = d.pinnedCA(certs, caPEM); err != nil {
			return nil, err
		}
	}
	if err := d.readAgain(ctx, server, certs, kubeconfig); err != nil {
		return nil, err
	}
	return caPEM, nil
}

// signedKubeconfig reads cluster-info unverified and returns its kubeconfig once the JWS the
// bootstrap signer made for token id checks out with secret.
func (d Discovery) signedKubeconfig(ctx context.Context, server, id, secret string) (string, error) {
	insecure := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} // verified below: JWS, pin, then a verified read
	info, err := d.get(ctx, server, insecure)
	if err != nil {
		return "", err
	}
	kubeconfig, ok := info.Data["kubeconfig"]
	if !ok {
		return "", errors.New("certs: cluster-info has no kubeconfig")
	}
	sig, ok := info.Data["jws-kubeconfig-"+id]
	if !ok {
		return "", fmt.Errorf("%w (no jws-kubeconfig-%s: unknown or expired token, or no bootstrap signer running)", ErrJWS, id)
	}
	if err := verifyDetachedJWS(sig, []byte(kubeconfig), id, secret); err != nil {
		return "", err
	}
	return kubeconfig, nil
}

// parseCerts parses the certificates of caPEM; there must be one.
func parseCerts(caPEM []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for rest := caPEM; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certs: cluster-info CA: %w", err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("certs: cluster-info kubeconfig has no CA certificate")
	}
	return certs, nil
}

// pinnedCA keeps the certificates a pin matches (and their PEM), or fails naming the cloud's.
func (d Discovery) pinnedCA(certs []*x509.Certificate, caPEM []byte) ([]*x509.Certificate, []byte, error) {
	kept := pinned(certs, d.CAHashes)
	if len(kept) == 0 {
		have := make([]string, len(certs))
		for i, c := range certs {
			have[i] = CAHash(c)
		}
		if len(d.CAHashes) == 0 {
			return nil, nil, fmt.Errorf("%w: no pin given (and no CA from an earlier bootstrap); the cloud's CA is %s", ErrCAHash, strings.Join(have, ", "))
		}
		return nil, nil, fmt.Errorf("%w: the cloud's CA is %s", ErrCAHash, strings.Join(have, ", "))
	}
	// Only what a pin vouches for is trusted: a bundle that holds one pinned CA does not
	// bring in the others with it.
	if len(kept) < len(certs) {
		caPEM = nil
		for _, c := range kept {
			caPEM = append(caPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
		}
	}
	return kept, caPEM, nil
}

// readAgain reads cluster-info over a connection verified with certs and checks its kubeconfig
// is the one read unverified.
func (d Discovery) readAgain(ctx context.Context, server string, certs []*x509.Certificate, kubeconfig string) error {
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	again, err := d.get(ctx, server, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	if err != nil {
		return fmt.Errorf("certs: cluster-info over a verified connection: %w", err)
	}
	if again.Data["kubeconfig"] != kubeconfig {
		return errors.New("certs: cluster-info changed between the unverified and the verified read")
	}
	return nil
}

// pinned returns the certificates whose public key matches one of the pins.
func pinned(certs []*x509.Certificate, pins []string) []*x509.Certificate {
	var kept []*x509.Certificate
	for _, c := range certs {
		got := strings.TrimPrefix(CAHash(c), "sha256:")
		match := false
		for _, want := range pins {
			match = match || subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
		}
		if match {
			kept = append(kept, c)
		}
	}
	return kept
}

func (d Discovery) get(ctx context.Context, server string, tlsCfg *tls.Config) (*clusterInfo, error) {
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := &http.Transport{TLSClientConfig: tlsCfg, DisableKeepAlives: true}
	defer t.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+"/api/v1/namespaces/kube-public/configmaps/cluster-info", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := t.RoundTrip(req)
	if err != nil {
		return nil, fmt.Errorf("certs: cluster-info: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	d.count.add("received", len(body))
	if err != nil {
		return nil, fmt.Errorf("certs: cluster-info: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("certs: cluster-info: %s: %s", resp.Status, statusMessage(body))
	}
	var info clusterInfo
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, fmt.Errorf("certs: cluster-info: %w", err)
	}
	return &info, nil
}

// verifyDetachedJWS checks a compact JWS with detached payload ("header..signature"), HS256 keyed
// with the token secret and kid = token id, as the bootstrap signer writes it.
func verifyDetachedJWS(jws string, payload []byte, id, secret string) error {
	parts := strings.Split(jws, ".")
	if len(parts) != 3 || parts[1] != "" {
		return fmt.Errorf("%w: malformed detached signature", ErrJWS)
	}
	hdrJSON, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return fmt.Errorf("%w: header: %v", ErrJWS, err)
	}
	var hdr struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	if err := json.Unmarshal(hdrJSON, &hdr); err != nil {
		return fmt.Errorf("%w: header: %v", ErrJWS, err)
	}
	if hdr.Alg != "HS256" || hdr.Kid != id {
		return fmt.Errorf("%w: header alg %q kid %q", ErrJWS, hdr.Alg, hdr.Kid)
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return fmt.Errorf("%w: signature: %v", ErrJWS, err)
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(parts[0] + "." + base64.RawURLEncoding.EncodeToString(payload)))
	if !hmac.Equal(mac.Sum(nil), sig) {
		return fmt.Errorf("%w: signature mismatch (wrong token secret?)", ErrJWS)
	}
	return nil
}

// caFromKubeconfig returns the first cluster's certificate-authority-data.
func caFromKubeconfig(data []byte) ([]byte, error) {
	js, err := yamlToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("certs: cluster-info kubeconfig: %w", err)
	}
	var raw rawKubeconfig
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, fmt.Errorf("certs: cluster-info kubeconfig: %w", err)
	}
	if len(raw.Clusters) == 0 || raw.Clusters[0].Cluster.CAData == "" {
		return nil, errors.New("certs: cluster-info kubeconfig has no certificate-authority-data")
	}
	ca, err := base64.StdEncoding.DecodeString(raw.Clusters[0].Cluster.CAData)
	if err != nil {
		return nil, fmt.Errorf("certs: cluster-info certificate-authority-data: %w", err)
	}
	return ca, nil
}

// statusMessage returns a Status body's message, or the body's start.
func statusMessage(body []byte) string {
	var st struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &st) == nil && st.Message != "" {
		return st.Message
	}
	if len(body) > 200 {
		body = body[:200]
	}
	return strings.TrimSpace(string(body))
}
