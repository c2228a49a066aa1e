package pool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"nodehub/wire"
)

// Fetch sends one GET (path with its query) to an upstream, accepting protobuf then JSON.
type Fetch func(ctx context.Context, path string) (*http.Response, error)

// Upstream is where a store's list and watch come from: the cloud, or the pool's leader.
type Upstream struct {
	// Name is "cloud" or the leader's address.
	Name  string
	Fetch Fetch
	// Silence, when set, ends a watch that received nothing for that long (a leader sends a
	// BOOKMARK every second, so silence means it is dead or cut off).
	Silence time.Duration
	// Failed, if set, is told when the upstream could not be reached, answered an error, or went
	// silent.
	Failed func(error)
}

// Picker returns the upstream to use now and a channel closed when that choice changes.
type Picker func() (Upstream, <-chan struct{})

// errGone is an upstream's 410: the store re-lists (not the upstream's fault).
var errGone = errors.New("pool: upstream expired the resourceVersion")

// run keeps the store in sync: list when needed, then watch from the store's resourceVersion,
// over and over, from whatever upstream pick says, until ctx ends.
func (s *Store) run(ctx context.Context, pick Picker, log *slog.Logger) {
	backoff := 250 * time.Millisecond
	failures := 0
	for ctx.Err() == nil {
		up, changed := pick()
		uctx, cancel := context.WithCancel(ctx)
		stop := make(chan struct{})
		go func() {
			select {
			case <-changed:
				cancel()
			case <-stop:
			}
		}()
		err := s.sync(uctx, up)
		switched := uctx.Err() != nil && ctx.Err() == nil
		close(stop)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil || switched || errors.Is(err, errGone):
			backoff, failures = 250*time.Millisecond, 0
			continue
		}
		if up.Failed != nil {
			up.Failed(err)
		}
		log.Debug("pool: upstream failed", "resource", s.res.String(), "upstream", up.Name, "err", err)
		if failures++; failures == 5 && !s.Synced() {
			log.Warn("pool: cannot list the resource; its clients go to the cloud until it can (RBAC?)", "resource", s.res.String(), "upstream", up.Name, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// sync lists when the store needs it, then watches until the watch ends.
func (s *Store) sync(ctx context.Context, up Upstream) error {
	if s.needsList() {
		if err := s.list(ctx, up); err != nil {
			return err
		}
	}
	return s.watch(ctx, up)
}

func (s *Store) list(ctx context.Context, up Upstream) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	resp, err := up.Fetch(ctx, s.res.url(""))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return statusErr("list", resp)
	}
	var items []*object
	var meta wire.ListMeta
	var itemErr error
	sp := wire.NewListSplitter(wire.ParseMediaType(resp.Header.Get("Content-Type")), wire.ListHandler{
		Meta: func(m wire.ListMeta) { meta = m },
		Item: func(raw []byte) error {
			o, err := newObject(raw, s.res)
			if err != nil {
				itemErr = err
				return nil
			}
			items = append(items, o)
			return nil
		},
	})
	if _, err := io.Copy(sp, resp.Body); err != nil {
		return fmt.Errorf("pool: list %s: %w", s.res, err)
	}
	if err := sp.Close(); err != nil {
		return fmt.Errorf("pool: list %s: %w", s.res, err)
	}
	if itemErr != nil {
		return fmt.Errorf("pool: list %s: %w", s.res, itemErr)
	}
	s.replace(items, parseRV(meta.ResourceVersion), meta.APIVersion, meta.ItemKind())
	return nil
}

func (s *Store) watch(ctx context.Context, up Upstream) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	timeout := 300 + rand.IntN(300) // as client-go spreads its watches: 5–10 minutes
	path := s.res.url("watch=1&allowWatchBookmarks=true&timeoutSeconds=" + strconv.Itoa(timeout) +
		"&resourceVersion=" + strconv.FormatUint(s.ResourceVersion(), 10))
	resp, err := up.Fetch(ctx, path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusGone {
		s.expire()
		return errGone
	}
	if resp.StatusCode != http.StatusOK {
		return statusErr("watch", resp)
	}
	var quiet *time.Timer
	var silent atomic.Bool
	if up.Silence > 0 {
		quiet = time.AfterFunc(up.Silence, func() { silent.Store(true); cancel() })
		defer quiet.Stop()
	}
	var evErr error
	sp := wire.NewWatchSplitter(wire.ParseMediaType(resp.Header.Get("Content-Type")), func(ev wire.WatchEvent) error {
		switch ev.Type {
		case wire.EventError:
			s.expire() // the apiserver's in-stream error is its 410 Expired
			evErr = errGone
			return errGone
		case wire.EventBookmark:
			if m, err := wire.ExtractMeta(ev.Object, s.res.Resource); err == nil {
				s.bookmark(parseRV(m.ResourceVersion))
			}
			return nil
		}
		o, err := newObject(ev.Object, s.res)
		if err != nil {
			return err
		}
		s.apply(ev.Type, o)
		return nil
	})
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if quiet != nil {
				quiet.Reset(up.Silence)
			}
			if _, perr := sp.Write(buf[:n]); perr != nil {
				if evErr != nil {
					return evErr
				}
				return fmt.Errorf("pool: watch %s: %w", s.res, perr)
			}
		}
		if err == io.EOF {
			return nil // the watch's timeout: watch again from where the store is
		}
		if err != nil {
			if silent.Load() {
				return fmt.Errorf("pool: watch %s from %s: silent for %v", s.res, up.Name, up.Silence)
			}
			return fmt.Errorf("pool: watch %s: %w", s.res, err)
		}
	}
}

// statusError is an upstream's answer other than 200 (as opposed to no answer at all).
type statusError struct {
	what, status string
	body         []byte
}

func (e *statusError) Error() string {
	return fmt.Sprintf("pool: %s: %s: %q", e.what, e.status, e.body)
}

// statusErr reads an error answer's first bytes into an error.
func statusErr(what string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return &statusError{what: what, status: resp.Status, body: b}
}
