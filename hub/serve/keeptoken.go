package serve

import (
	"bytes"
	"io"
	"net/http"

	"nodehub/hub/tokens"
	"nodehub/wire"
)

// Kubelet's token requests pass through online as they are; the hub keeps the token the cloud
// issued (hub/tokens), so the same request is answered offline (hub/local).

// isTokenRequest reports whether a request asks for a ServiceAccount token.
func isTokenRequest(ri *wire.RequestInfo) bool {
	return ri.IsResource && ri.Verb == wire.VerbCreate && ri.Group == "" && ri.Resource == "serviceaccounts" && ri.Subresource == "token"
}

// recordToken keeps the token of a successful answer to a token request whose body was peeked
// (q.caller set). The answer is read whole (a TokenRequest is small) and passed on unchanged.
func (p *Pipeline) recordToken(q *proxyRequest, resp *http.Response) {
	if q.caller == "" || resp.StatusCode != http.StatusCreated || resp.Header.Get("Content-Encoding") != "" || resp.ContentLength > tokens.MaxBody {
		return
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, tokens.MaxBody+1))
	resp.Body = readCloser{io.MultiReader(bytes.NewReader(body), resp.Body), resp.Body}
	if err != nil || len(body) > tokens.MaxBody {
		return
	}
	req, err1 := tokens.Decode(q.kept)
	answer, err2 := tokens.Decode(body)
	if err1 != nil || err2 != nil {
		return
	}
	e, err := tokens.EntryOf(answer)
	if err != nil {
		return
	}
	p.Tokens.Put(tokens.KeyOf(q.caller, q.ri.Namespace, q.ri.Name, req), e)
	p.IDs.Vouch(e.Token)
}
