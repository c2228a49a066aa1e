// Package listwatch keeps a reader of a Kubernetes collection current the way client-go's
// reflector does: list it, watch it from the list's resourceVersion, and start again (after a
// back-off when something failed) until the context ends. It is the one such loop in nodehub: the
// pool's shared stores and the hub's topology source both run it. Bodies stay raw bytes, split by
// wire; what the items mean is the caller's business.
package listwatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"nodehub/wire"
)

// Fetch sends one GET for path (with its query) and returns the answer.
type Fetch func(ctx context.Context, path string) (*http.Response, error)

// StatusError is an answer other than 200 OK (as opposed to no answer at all).
type StatusError struct {
	Op     string // "list" or "watch"
	Path   string
	Code   int
	Status string
	Body   []byte // its first bytes
	// RetryAfter is the answer's Retry-After (429, 503), 0 when it had none.
	RetryAfter time.Duration
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: %s: %q", e.Op, e.Path, e.Status, e.Body)
}

// IsGone reports whether err is an answer 410 Gone: the resourceVersion expired, list again.
func IsGone(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == http.StatusGone
}

// ErrSilent ends a watch that received nothing for its silence limit.
var ErrSilent = errors.New("listwatch: the watch went silent")

// RetryAfter is how long an answer asked the loop to wait (429 Too Many Requests with
// Retry-After, capped at maxRetryAfter), or 0.
func RetryAfter(err error) time.Duration {
	var se *StatusError
	if !errors.As(err, &se) {
		return 0
	}
	if se.Code == http.StatusTooManyRequests && se.RetryAfter <= 0 {
		return time.Second // 429 without Retry-After: the apiserver's own default
	}
	return se.RetryAfter
}

// refused reports whether err is an answer 403 Forbidden or 404 Not Found.
func refused(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && (se.Code == http.StatusForbidden || se.Code == http.StatusNotFound)
}

// maxRefused bounds the back-off of a loop the cloud keeps refusing (Loop.Refused): an API
// installed later, or a permission granted, is noticed within half an hour.
const maxRefused = 30 * time.Minute

// nextRefusal is the back-off after one more refusal in a row: double, up to maxRefused (or the
// loop's first refusal back-off, if that is longer).
func nextRefusal(cur, first time.Duration) time.Duration {
	return min(2*cur, max(first, maxRefused))
}

// maxRetryAfter bounds a Retry-After the loop honours: a server's figure is a hint, not a lease
// on the hub's freshness.
const maxRetryAfter = 5 * time.Minute

func statusErr(op, path string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	e := &StatusError{Op: op, Path: path, Code: resp.StatusCode, Status: resp.Status, Body: b}
	if sec, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && sec > 0 {
		e.RetryAfter = min(time.Duration(sec)*time.Second, maxRetryAfter)
	}
	return e
}

// List GETs path and calls item with each raw item of the list, in the answer's own format
// (JSON or protobuf), as it streams in; it returns the list's metadata. An error from item ends
// the list.
func List(ctx context.Context, fetch Fetch, path string, item func(raw []byte) error) (wire.ListMeta, error) {
	var meta wire.ListMeta
	resp, err := fetch(ctx, path)
	if err != nil {
		return meta, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return meta, statusErr("list", path, resp)
	}
	sp := wire.NewListSplitter(wire.ParseMediaType(resp.Header.Get("Content-Type")), wire.ListHandler{
		Meta: func(m wire.ListMeta) { meta = m },
		Item: item,
	})
	if _, err := io.Copy(sp, resp.Body); err != nil {
		return meta, fmt.Errorf("list %s: %w", path, err)
	}
	if err := sp.Close(); err != nil {
		return meta, fmt.Errorf("list %s: %w", path, err)
	}
	return meta, nil
}

// Watch GETs path (a watch) and calls event with each event until the watch ends: nil when the
// server ended it (its timeout), event's error when event fails, ErrSilent when silence > 0 and
// nothing arrived for that long, else the failure.
func Watch(ctx context.Context, fetch Fetch, path string, silence time.Duration, event func(wire.WatchEvent) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	resp, err := fetch(ctx, path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return statusErr("watch", path, resp)
	}
	var quiet *time.Timer
	if silence > 0 {
		quiet = time.AfterFunc(silence, func() { cancel(ErrSilent) })
		defer quiet.Stop()
	}
	var evErr error
	sp := wire.NewWatchSplitter(wire.ParseMediaType(resp.Header.Get("Content-Type")), func(ev wire.WatchEvent) error {
		evErr = event(ev)
		return evErr
	})
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if quiet != nil {
				quiet.Reset(silence)
			}
			if _, perr := sp.Write(buf[:n]); perr != nil {
				if evErr != nil {
					return evErr
				}
				return fmt.Errorf("watch %s: %w", path, perr)
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if errors.Is(context.Cause(ctx), ErrSilent) {
				return fmt.Errorf("watch %s: %w (%v)", path, ErrSilent, silence)
			}
			return fmt.Errorf("watch %s: %w", path, err)
		}
	}
}

// Run calls step until ctx ends: at once again after step returned nil, else after a back-off
// that starts at first, doubles up to most, and resets after a success. The back-off also ends when
// the channel step returned (if any) is closed: a new upstream to try. (Loop with Wake also ends
// it when the cloud comes back.)
func Run(ctx context.Context, first, most time.Duration, step func(ctx context.Context) (wake <-chan struct{}, err error)) {
	Loop{First: first, Most: most}.Run(ctx, step)
}

// Loop is a list-watch loop's timing.
type Loop struct {
	// First and Most bound the back-off after a failure: it starts at First and doubles up to
	// Most.
	First, Most time.Duration
	// Refused, if set, is the first back-off after an answer 403 or 404 (an API the cluster does
	// not serve, or this identity may not read: since Kubernetes 1.32 a node may list no Node but
	// its own). Such answers do not change by the minute and each retry costs the link a request
	// and an error (~0.7 KB: 1 MiB a day at one a minute), so the back-off doubles with every
	// refusal in a row up to maxRefused (or Refused, if longer). Default Most.
	Refused time.Duration
	// Wake, if set, returns a channel closed when every loop should stop waiting out its back-off
	// (the cloud turned reachable again: the hub spreads that moment over a short random window
	// so a region's gateways do not all come back in the same instant). It does not cut short a
	// Retry-After the server asked for.
	Wake func() <-chan struct{}
}

// Run calls step until ctx ends: at once again after step returned nil, else after the back-off,
// which ends early when the channel step returned (if any) or Wake's is closed. After an answer
// with Retry-After the loop waits that long (at least): meanwhile the caller's clients are
// answered from what it holds. That wait ends early only when the channel step returned is
// closed (another upstream: the figure was the old one's), or, after a 503 (the upstream could
// not serve: a pool leader cut off from the cloud), when Wake's is (the link is back); a 429's
// throttling is the server's to end.
func (l Loop) Run(ctx context.Context, step func(ctx context.Context) (wake <-chan struct{}, err error)) {
	backoff, refusal := l.First, l.Refused
	for ctx.Err() == nil {
		var woken <-chan struct{}
		if l.Wake != nil {
			woken = l.Wake() // taken before the step: a return during it still wakes the back-off
		}
		wake, err := step(ctx)
		if err == nil {
			backoff, refusal = l.First, l.Refused
			continue
		}
		if ra := RetryAfter(err); ra > 0 {
			if !waitRetryAfter(ctx, ra, wake, unavailable(err), woken) {
				return
			}
			continue
		}
		wait := backoff
		if l.Refused > 0 && refused(err) {
			wait = max(backoff, refusal)
			refusal = nextRefusal(refusal, l.Refused)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-wake:
		case <-woken:
			t.Stop()
			backoff = l.First // the cloud is back: a fresh start, no back-off left over
			continue
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, l.Most)
	}
}

// unavailable reports whether err is an answer 503 Service Unavailable.
func unavailable(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == http.StatusServiceUnavailable
}

// waitRetryAfter waits out a Retry-After of ra, with a little jitter above it; a close of
// changed (another upstream), or of woken when wakeable (a 503 and the link is back), ends it
// early. It returns false when ctx ended.
func waitRetryAfter(ctx context.Context, ra time.Duration, changed <-chan struct{}, wakeable bool, woken <-chan struct{}) bool {
	if !wakeable {
		woken = nil
	}
	t := time.NewTimer(ra + rand.N(ra/4+time.Millisecond))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-changed:
	case <-woken:
	}
	return true
}
