package tokens

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"time"
)

// StandInLife is how long a stand-in token claims to live: kubelet asks again at its next volume
// sync after that, and gets a real token from the cloud once it is back.
const StandInLife = time.Minute

// StandInIssuer is the iss claim of stand-in tokens, so they are told apart from the cloud's.
const StandInIssuer = "nodehub-offline-stand-in"

// StandIn answers a token request offline when the cloud never issued a valid token for it, as
// YurtHub does: a JWT-shaped token for system:serviceaccount:<ns>:<sa>, signed with a key made at
// random per call, so no server accepts it. It lets kubelet mount the pod's projected token volume
// and start the pod; the pod's calls with it fail authentication until kubelet replaces it (its
// expirationTimestamp is StandInLife ahead, so kubelet asks again at its next sync).
func StandIn(req *TokenRequest, namespace, serviceAccount string, now time.Time) *TokenRequest {
	exp := now.Add(StandInLife)
	claims := map[string]any{
		"iss": StandInIssuer,
		"sub": "system:serviceaccount:" + namespace + ":" + serviceAccount,
		"iat": now.Unix(),
		"nbf": now.Unix(),
		"exp": exp.Unix(),
	}
	if len(req.Spec.Audiences) > 0 {
		claims["aud"] = req.Spec.Audiences
	}
	enc := base64.RawURLEncoding
	header := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	payload, _ := json.Marshal(claims)
	signing := header + "." + enc.EncodeToString(payload)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(signing))
	e := Entry{Token: signing + "." + enc.EncodeToString(mac.Sum(nil)), Expiration: exp, ValidUntil: exp}
	return Answer(req, namespace, serviceAccount, e, now)
}
