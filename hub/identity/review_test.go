package identity

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// answers is a cloud that answers reviews from a map of tokens' headers, counting the questions.
type answers struct {
	mu    sync.Mutex
	asked map[string]int
}

func (a *answers) ask(auth string, u User, err error) Ask {
	return func(context.Context) (User, error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.asked == nil {
			a.asked = map[string]int{}
		}
		a.asked[auth]++
		return u, err
	}
}

var saA = User{Name: "system:serviceaccount:ns:a", Groups: []string{"system:serviceaccounts", "system:authenticated"}}

// A token reads its own cache until the cloud's review names its ServiceAccount; its
// ServiceAccount's from then on, as does the same ServiceAccount's next token once reviewed or
// issued. The token's claims play no part.
func TestOwnerFollowsWhatTheReviewSays(t *testing.T) {
	id := Open("", nil)
	var cloud answers
	tok := "Bearer " + jwt(`{"sub":"system:serviceaccount:ns:b","exp":1}`) // claims b; the cloud says a
	own, c := id.Owner("app", tok)
	if own != "app@"+c.Hash || id.Vouched(c) {
		t.Fatalf("before the review: %q %+v", own, c)
	}
	id.Learn(context.Background(), c, cloud.ask(tok, saA, nil))
	sa := serviceAccountHash(saA.Name)
	if own, _ := id.Owner("app", tok); own != "app@"+sa || !id.Vouched(c) {
		t.Fatalf("after the review: %q, want app@%s", own, sa)
	}
	if own, _ := id.Owner("app", "bearer "+tok[len("Bearer "):]+" extra"); own != "app@"+sa {
		t.Fatalf("the same token as the apiserver reads it: %q", own)
	}
	id.Learn(context.Background(), c, cloud.ask(tok, saA, nil))
	if cloud.asked[tok] != 1 {
		t.Fatalf("asked %d times about a known token", cloud.asked[tok])
	}
	next := jwt(`{"sub":"system:serviceaccount:ns:a","exp":2}`)
	id.Vouch(next)
	if own, _ := id.Owner("app", "Bearer "+next); own != "app@"+sa {
		t.Fatalf("a token the cloud issued: %q", own)
	}
	if own, _ := id.Owner("app", ""); own != "app@anonymous" {
		t.Fatalf("no credential: %q", own)
	}
}

// A header the apiserver reads no bearer token in (it serves it as anonymous) is never asked
// about, never vouched for and never reads a ServiceAccount's cache, even when a token with the
// same text was reviewed; nor does system:anonymous or a refused review vouch for anything.
func TestOnlyAnAuthenticatedReviewVouches(t *testing.T) {
	id := Open("", nil)
	var cloud answers
	real := jwt(`{"sub":"system:serviceaccount:ns:a"}`)
	id.Learn(context.Background(), Of("Bearer "+real), cloud.ask("Bearer "+real, saA, nil))
	for _, auth := range []string{"Bearer  " + real, "Bearer\t" + real, "Bearer", "Basic " + real} {
		c := Of(auth)
		id.Learn(context.Background(), c, cloud.ask(auth, saA, nil))
		if own, _ := id.Owner("app", auth); own != "app@"+c.Hash || id.Vouched(c) || cloud.asked[auth] != 0 {
			t.Errorf("%q: %q vouched %v asked %d; want its own cache, unvouched, never asked", auth, own, id.Vouched(c), cloud.asked[auth])
		}
	}
	for i, u := range []User{
		{Name: "system:anonymous", Groups: []string{"system:unauthenticated"}},
		{Name: "system:serviceaccount:ns:a", Groups: []string{"system:unauthenticated"}},
		{}, // 401, 403, 404
	} {
		auth := fmt.Sprintf("Bearer forged-%d", i)
		c := Of(auth)
		id.Learn(context.Background(), c, cloud.ask(auth, u, nil))
		id.Learn(context.Background(), c, cloud.ask(auth, u, nil))
		if own, _ := id.Owner("app", auth); own != "app@"+c.Hash || id.Vouched(c) || cloud.asked[auth] != 1 {
			t.Errorf("%+v: %q vouched %v asked %d; want its own cache, unvouched, asked once", u, own, id.Vouched(c), cloud.asked[auth])
		}
	}
	alice := Of("Bearer alice")
	id.Learn(context.Background(), alice, cloud.ask("alice", User{Name: "alice", Groups: []string{"system:authenticated"}}, nil))
	if own, _ := id.Owner("app", "Bearer alice"); own != "app@"+alice.Hash || !id.Vouched(alice) {
		t.Errorf("an authenticated user: %q vouched %v; want its own cache, vouched", own, id.Vouched(alice))
	}
}

// A refusal is not asked again before refuseFor, no answer not before retryAfter, a question cut
// short by its request not remembered; at most maxAsking questions are in flight.
func TestReviewsAreBounded(t *testing.T) {
	id := Open("", nil)
	now := time.Now()
	c := Of("Bearer t")
	if _, mine := id.begin(c, now); !mine {
		t.Fatal("a new token is not asked about")
	}
	id.end(c, User{}, errors.New("link down"), false, now)
	if _, mine := id.begin(c, now.Add(retryAfter-time.Second)); mine {
		t.Fatal("asked again before retryAfter")
	}
	if _, mine := id.begin(c, now.Add(retryAfter)); !mine {
		t.Fatal("not asked again after retryAfter")
	}
	id.end(c, User{}, nil, false, now)
	if _, mine := id.begin(c, now.Add(refuseFor-time.Second)); mine {
		t.Fatal("a refused token asked again before refuseFor")
	}
	cut := Of("Bearer cut")
	id.begin(cut, now)
	id.end(cut, User{}, context.Canceled, true, now)
	if _, mine := id.begin(cut, now); !mine {
		t.Fatal("a question its request cut short was remembered")
	}
	id.end(cut, User{}, context.Canceled, true, now)
	for i := 0; i < maxAsking; i++ {
		if _, mine := id.begin(Of(fmt.Sprintf("Bearer f%d", i)), now); !mine {
			t.Fatalf("question %d not asked", i)
		}
	}
	if w, mine := id.begin(Of("Bearer one-more"), now); mine || w != nil {
		t.Fatal("past maxAsking in flight")
	}
	if w, mine := id.begin(Of("Bearer f0"), now); mine || w == nil {
		t.Fatal("a token's second request does not wait for its question")
	}
	for i := 0; i < maxRefused+10; i++ {
		id.reviews.refuse(fmt.Sprintf("h%d", i), now.Add(time.Hour))
	}
	if len(id.reviews.refused) != maxRefused || len(id.reviews.order) != maxRefused {
		t.Fatalf("refusals: %d remembered", len(id.reviews.refused))
	}
}

// Requests of one new token at once ask one question; the others wait for its answer.
func TestOneQuestionPerToken(t *testing.T) {
	id := Open("", nil)
	c := Of("Bearer t")
	release := make(chan struct{})
	var asked sync.WaitGroup
	asked.Add(1)
	n := 0
	ask := func(context.Context) (User, error) {
		n++
		asked.Done()
		<-release
		return saA, nil
	}
	first := make(chan struct{})
	go func() { defer close(first); id.Learn(context.Background(), c, ask) }()
	asked.Wait()
	second := make(chan struct{})
	go func() { defer close(second); id.Learn(context.Background(), c, ask) }()
	close(release)
	<-first
	<-second
	if n != 1 || !id.Vouched(c) {
		t.Fatalf("asked %d times, vouched %v", n, id.Vouched(c))
	}
}
