package tokens

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"nodehub/wire"
)

const (
	apiVersion = "authentication.k8s.io/v1"
	kind       = "TokenRequest"
	// MaxBody bounds a TokenRequest body nodehub reads (they are a few hundred bytes).
	MaxBody = 64 << 10
)

// Decode reads a TokenRequest (JSON or the protobuf envelope).
func Decode(body []byte) (*TokenRequest, error) {
	tr := &TokenRequest{}
	if wire.IsProtobuf(body) {
		av, k, err := wire.DecodeProto(body, tr)
		if err != nil {
			return nil, fmt.Errorf("tokens: decode TokenRequest: %w", err)
		}
		if av != apiVersion || k != kind {
			return nil, fmt.Errorf("tokens: a %s/%s is not a TokenRequest", av, k)
		}
		return tr, nil
	}
	if err := json.Unmarshal(body, tr); err != nil {
		return nil, fmt.Errorf("tokens: decode TokenRequest: %w", err)
	}
	if tr.Kind != "" && tr.Kind != kind {
		return nil, fmt.Errorf("tokens: a %s is not a TokenRequest", tr.Kind)
	}
	return tr, nil
}

// Encode writes a TokenRequest as JSON or in the protobuf envelope.
func Encode(tr *TokenRequest, protobuf bool) ([]byte, error) {
	tr.APIVersion, tr.Kind = apiVersion, kind
	if protobuf {
		return wire.EncodeProto(apiVersion, kind, tr)
	}
	return json.Marshal(tr)
}

// KeyOf is the key of a token request made by identity for namespace/serviceAccount.
func KeyOf(identity, namespace, serviceAccount string, tr *TokenRequest) Key {
	k := Key{Identity: identity, Namespace: namespace, ServiceAccount: serviceAccount, UID: string(tr.UID),
		Audiences: tr.Spec.Audiences}
	if tr.Spec.ExpirationSeconds != nil {
		k.ExpirationSeconds = *tr.Spec.ExpirationSeconds
	}
	if ref := tr.Spec.BoundObjectRef; ref != nil {
		k.BoundKind, k.BoundAPIVersion, k.BoundName, k.BoundUID = ref.Kind, ref.APIVersion, ref.Name, string(ref.UID)
	}
	return k
}

// EntryOf is what is kept of the cloud's answer to a token request.
func EntryOf(answer *TokenRequest) (Entry, error) {
	st := answer.Status
	if st.Token == "" {
		return Entry{}, errors.New("tokens: an answer without a token")
	}
	e := Entry{Token: st.Token, Expiration: st.ExpirationTimestamp.Time, ValidUntil: st.ExpirationTimestamp.Time,
		Audiences: answer.Spec.Audiences}
	if answer.Spec.ExpirationSeconds != nil {
		e.ExpirationSeconds = *answer.Spec.ExpirationSeconds
	}
	if exp, ok := jwtExpiry(st.Token); ok {
		e.ValidUntil = exp
	}
	return e, nil
}

// Answer is the TokenRequest the apiserver would return for req with the kept entry: the request
// echoed, with the spec as the cloud filled it and the kept token in its status.
func Answer(req *TokenRequest, namespace, serviceAccount string, e Entry, now time.Time) *TokenRequest {
	out := req.DeepCopy()
	out.Name, out.Namespace = serviceAccount, namespace
	out.CreationTimestamp.Time = now.Truncate(time.Second)
	if len(e.Audiences) > 0 {
		out.Spec.Audiences = e.Audiences
	}
	if e.ExpirationSeconds > 0 {
		s := e.ExpirationSeconds
		out.Spec.ExpirationSeconds = &s
	}
	out.Status.Token = e.Token
	out.Status.ExpirationTimestamp.Time = e.Expiration
	return out
}

// jwtExpiry reads a JWT's exp claim without checking its signature (the token came from the cloud).
func jwtExpiry(tok string) (time.Time, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 || len(parts[1]) > 8192 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp <= 0 {
		return time.Time{}, false
	}
	return time.Unix(claims.Exp, 0), true
}

// Caller names who asks, for what is kept per caller: NodeIdentity for the node's own clients
// (node is true), else a hash of the request's Authorization header ("" for none, which keeps
// nothing).
func Caller(node bool, authorization string) string {
	if node {
		return NodeIdentity
	}
	if authorization == "" {
		return ""
	}
	sum := sha256.Sum256([]byte("token-caller:" + authorization))
	return "cred:" + hex.EncodeToString(sum[:16])
}
