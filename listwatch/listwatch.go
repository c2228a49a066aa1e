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
	"net/http"
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

func statusErr(op, path string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return &StatusError{Op: op, Path: path, Code: resp.StatusCode, Status: resp.Status, Body: b}
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
// the channel step returned (if any) is closed: a new upstream to try.
func Run(ctx context.Context, first, most time.Duration, step func(ctx context.Context) (wake <-chan struct{}, err error)) {
	backoff := first
	for ctx.Err() == nil {
		wake, err := step(ctx)
		if err == nil {
			backoff = first
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, most)
	}
}
