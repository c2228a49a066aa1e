package identity

import (
	"context"
	"slices"
	"time"
)

// Learning who a token is: the hub asks the cloud (the caller's Ask: a SelfSubjectReview with the
// request's own Authorization header, through the server that answered it) once per bearer token
// it does not know, and believes only that answer. The questions are bounded: at most maxAsking
// in flight (past that a token is not asked about, this time), one per token (a request that
// finds its token's question asked waits for the answer), and an answer that vouches for nobody
// is remembered (refusals, bounded) so that the token is not asked about again for refuseFor
// (retryAfter when no answer came).

const (
	maxAsking  = 4
	maxRefused = 1024
	refuseFor  = 10 * time.Minute
	retryAfter = time.Minute
)

// User is who the cloud says a credential is: a SelfSubjectReview's status.userInfo.
type User struct {
	Name   string   `json:"username"`
	Groups []string `json:"groups"`
}

// authenticated reports whether u is a user the apiserver authenticated: system:anonymous (or
// anyone in system:unauthenticated) never vouches for a credential.
func (u User) authenticated() bool {
	return u.Name != "" && u.Name != "system:anonymous" && !slices.Contains(u.Groups, "system:unauthenticated")
}

// Ask asks the cloud who a credential is. A User without a name is an answer that vouches for
// nobody (the review refused: 401, 403, 404); an error is no answer (the cloud or the link
// failed).
type Ask func(ctx context.Context) (User, error)

// reviews is what the table knows of its questions; the table's mutex guards it.
type reviews struct {
	asking  map[string]chan struct{} // token hash → closed when its answer is in
	refused map[string]time.Time     // token hash → when it may be asked about again
	order   []string                 // refused's keys, oldest first
}

func newReviews() reviews {
	return reviews{asking: map[string]chan struct{}{}, refused: map[string]time.Time{}}
}

// Learn asks the cloud who credential c is, unless it brings no bearer token, the table knows it,
// the cloud refused it lately, or too many questions are in flight; a request whose token's
// question is asked waits for its answer (or for ctx). A token the cloud names as
// system:serviceaccount:<ns>:<name> reads and fills that ServiceAccount's cache from now on;
// another authenticated user's is vouched for with a cache of its own; anything else is
// remembered as refused. A question cut short by ctx is not remembered.
func (id *Table) Learn(ctx context.Context, c Credential, ask Ask) {
	wait, mine := id.begin(c, time.Now())
	if !mine {
		if wait != nil {
			select {
			case <-wait:
			case <-ctx.Done():
			}
		}
		return
	}
	u, err := ask(ctx)
	id.end(c, u, err, ctx.Err() != nil, time.Now())
}

// begin says whether the caller asks about c (mine), or waits for the question being asked.
func (id *Table) begin(c Credential, now time.Time) (wait <-chan struct{}, mine bool) {
	if !c.Bearer {
		return nil, false
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	r := &id.reviews
	if ch, ok := r.asking[c.Hash]; ok {
		return ch, false
	}
	if id.m[c.Hash] != "" || now.Before(r.refused[c.Hash]) || len(r.asking) >= maxAsking {
		return nil, false
	}
	r.asking[c.Hash] = make(chan struct{})
	return nil, true
}

// end records the cloud's answer about c and wakes those who wait for it.
func (id *Table) end(c Credential, u User, err error, gaveUp bool, now time.Time) {
	id.mu.Lock()
	defer id.mu.Unlock()
	r := &id.reviews
	close(r.asking[c.Hash])
	delete(r.asking, c.Hash)
	switch {
	case err == nil && isServiceAccount(u.Name) && u.authenticated():
		id.addLocked(c.Hash, serviceAccountHash(u.Name))
	case err == nil && u.authenticated():
		id.addLocked(c.Hash, c.Hash)
	case gaveUp:
	case err != nil:
		r.refuse(c.Hash, now.Add(retryAfter))
	default:
		r.refuse(c.Hash, now.Add(refuseFor))
	}
}

// refuse remembers that token hash h is not asked about before until; the oldest refusal is
// forgotten past maxRefused.
func (r *reviews) refuse(h string, until time.Time) {
	if _, ok := r.refused[h]; !ok {
		r.order = append(r.order, h)
	}
	r.refused[h] = until
	for len(r.order) > maxRefused {
		delete(r.refused, r.order[0])
		r.order = r.order[1:]
	}
}
