package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"nodehub/hub/identity"
	"nodehub/hub/remote"
	"nodehub/wire"
)

// Who a request's own bearer token is, the hub learns from the apiserver alone (hub/identity):
// when a server answers a resource request that brings a token the hub does not know with a 2xx,
// the hub asks that server, through the same transport, a SelfSubjectReview sent with the
// request's Authorization header, before the answer is cached (so it is cached for the owner the
// review names). The token's claims and the answer's status say nothing: a header the apiserver
// serves as anonymous gets a 2xx for what anonymous may read. One question per new token
// (kubelet rotates a pod's projected token about hourly), bounded by hub/identity; its bytes
// count as purpose "own" (nodehub_cloud_bytes_total).

const (
	ReviewPath = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
	reviewBody = `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`
	// reviewTimeout bounds the question; the answer it holds back waits at most this long.
	reviewTimeout   = 5 * time.Second
	maxReviewAnswer = 64 << 10
)

// askWho returns how the hub asks the server that answered out (a forwarded request, its URL the
// server's) who out's credential is: a SelfSubjectReview with exactly out's Authorization header,
// and nothing else of it, through that server's transport for the clients' own credentials
// (Passthrough), over its HTTP/2 connection: the request's own connection is busy with the answer
// the review holds back.
func (p *Pipeline) askWho(out *http.Request) identity.Ask {
	return func(ctx context.Context) (identity.User, error) {
		b := p.backendOf(out.URL.Host)
		if b == nil {
			return identity.User{}, errors.New("review: the answering server is not one of the hub's")
		}
		ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, ReviewPath, strings.NewReader(reviewBody))
		if err != nil {
			return identity.User{}, err
		}
		req.Header["Authorization"] = slices.Clone(out.Header["Authorization"])
		req.Header.Set("Content-Type", wire.MediaJSON)
		req.Header.Set("Accept", wire.MediaJSON)
		req.Header.Set("User-Agent", "nodehub/identity")
		resp, err := CountPurpose(p.Metrics.Purpose, "own", req)(b.RoundTrip(remote.Route{Identity: remote.Passthrough, Stream: true}, req))
		if err != nil {
			return identity.User{}, err
		}
		defer resp.Body.Close()
		return readReview(resp)
	}
}

// backendOf returns the server at host, or nil.
func (p *Pipeline) backendOf(host string) *remote.Backend {
	for _, b := range p.Balancer.Backends {
		if b.URL.Host == host {
			return b
		}
	}
	return nil
}

// readReview reads a SelfSubjectReview's answer: who the server authenticated; nobody (a User
// without a name) when it refused (401, 403, 404: no such API); an error when it gave no answer
// (5xx, 429, a body it cut or that is not a review).
func readReview(resp *http.Response) (identity.User, error) {
	if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
		return identity.User{}, fmt.Errorf("review: %s", resp.Status)
	}
	if resp.StatusCode/100 != 2 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxReviewAnswer))
		return identity.User{}, nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxReviewAnswer+1))
	if err != nil || len(body) > maxReviewAnswer {
		return identity.User{}, fmt.Errorf("review: answer cut or too large: %v", err)
	}
	var review struct {
		Kind   string `json:"kind"`
		Status struct {
			UserInfo identity.User `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.Unmarshal(body, &review); err != nil || review.Kind != "SelfSubjectReview" {
		return identity.User{}, fmt.Errorf("review: not a SelfSubjectReview: %v", err)
	}
	return review.Status.UserInfo, nil
}

// CountPurpose counts a request's body and its answer's as purpose (nodehub_cloud_bytes_total)
// through count (nil: nothing counted).
func CountPurpose(count func(purpose, direction string) func(int), purpose string, req *http.Request) func(*http.Response, error) (*http.Response, error) {
	return func(resp *http.Response, err error) (*http.Response, error) {
		if count == nil {
			return resp, err
		}
		if req.ContentLength > 0 {
			count(purpose, "sent")(int(req.ContentLength))
		}
		if err == nil {
			resp.Body = &wire.CountingBody{ReadCloser: resp.Body, Count: count(purpose, "received")}
		}
		return resp, err
	}
}
