package local

import (
	"fmt"
	"net/http"
	"time"

	"nodehub/hub/tokens"
)

// token answers `create serviceaccounts/<sa>/token` offline: the last token the cloud issued for
// the same request to the same caller while it is valid; when none is kept, a stand-in for the
// node's own clients (kubelet mounts the pod's token volume with it and starts the pod); for a
// client with its own credential, 503.
func (p *Proxy) token(w http.ResponseWriter, r *http.Request, req *Request) {
	ri := req.Info
	body, err := readBody(r)
	if err != nil {
		p.answerError(w, req, err, http.StatusBadRequest)
		return
	}
	tr, err := tokens.Decode(body)
	if err != nil {
		p.status(w, req, http.StatusBadRequest, "nodehub: "+err.Error())
		return
	}
	now := time.Now()
	if caller := tokens.Caller(req.Shared, r.Header.Get("Authorization")); p.Tokens != nil && caller != "" {
		if e, ok := p.Tokens.Get(tokens.KeyOf(caller, ri.Namespace, ri.Name, tr)); ok {
			if p.TokenServed != nil {
				p.TokenServed(e.Token)
			}
			p.writeToken(w, req, tokens.Answer(tr, ri.Namespace, ri.Name, e, now))
			return
		}
	}
	if !req.Shared {
		p.status(w, req, http.StatusServiceUnavailable, fmt.Sprintf("nodehub: the cloud is unreachable and no valid token it issued for this request of serviceaccounts/%s/token is kept", ri.Name))
		return
	}
	p.log().Debug("offline token request answered with a stand-in", "namespace", ri.Namespace, "serviceaccount", ri.Name)
	p.writeToken(w, req, tokens.StandIn(tr, ri.Namespace, ri.Name, now))
}

func (p *Proxy) writeToken(w http.ResponseWriter, req *Request, tr *tokens.TokenRequest) {
	f, _ := choose(req.Accept)
	out, err := tokens.Encode(tr, f.protobuf)
	if err != nil {
		p.status(w, req, http.StatusInternalServerError, "nodehub: "+err.Error())
		return
	}
	writeBody(w, http.StatusCreated, format{protobuf: f.protobuf}.contentType(false), out)
}
