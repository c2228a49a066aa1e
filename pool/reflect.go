package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"nodehub/listwatch"
	"nodehub/wire"
)

// Upstream is where a store's list and watch come from: the cloud, or the pool's leader.
type Upstream struct {
	// Name is "cloud" or the leader's address.
	Name string
	// Fetch sends one GET (path with its query) to the upstream, accepting protobuf then JSON.
	Fetch listwatch.Fetch
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
// over and over, from whatever upstream pick says, until ctx ends (listwatch's loop).
func (s *Store) run(ctx context.Context, pick Picker, log *slog.Logger) {
	failures := 0
	listwatch.Run(ctx, 250*time.Millisecond, 30*time.Second, func(ctx context.Context) (<-chan struct{}, error) {
		up, changed := pick()
		uctx, cancel := context.WithCancel(ctx)
		ended := make(chan struct{})
		go func() {
			select {
			case <-changed:
				cancel()
			case <-ended:
			}
		}()
		err := s.sync(uctx, up)
		switched := uctx.Err() != nil && ctx.Err() == nil
		close(ended)
		cancel()
		if ctx.Err() != nil || err == nil || switched || errors.Is(err, errGone) {
			failures = 0
			return changed, nil
		}
		if up.Failed != nil {
			up.Failed(err)
		}
		log.Debug("pool: upstream failed", "resource", s.res.String(), "upstream", up.Name, "err", err)
		if errors.Is(err, errTooLarge) && failures == 0 {
			log.Warn("pool: a shared store went past its bounds; its clients read the cloud", "resource", s.res.String(), "upstream", up.Name, "err", err)
		}
		if failures++; failures == 5 && !s.Synced() {
			log.Warn("pool: cannot list the resource; its clients go to the cloud until it can (RBAC?)", "resource", s.res.String(), "upstream", up.Name, "err", err)
		}
		return changed, err
	})
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
	var items []*object
	var itemErr error
	var size int64
	meta, err := listwatch.List(ctx, up.Fetch, s.res.url(""), func(raw []byte) error {
		o, err := newObject(raw, s.res)
		if err != nil {
			itemErr = err
			return nil
		}
		items, size = append(items, o), size+int64(len(o.raw))
		if s.over(len(items), size) {
			return errTooLarge // what was read goes: memory holds at most the bounds
		}
		return nil
	})
	if errors.Is(err, errTooLarge) {
		s.overflow()
		maxN, maxB := s.bounds()
		return fmt.Errorf("pool: list %s: more than %d objects or %d bytes; its clients read the cloud: %w", s.res, maxN, maxB, errTooLarge)
	}
	if err == nil {
		err = itemErr
	}
	if err != nil {
		return fmt.Errorf("pool: list %s: %w", s.res, err)
	}
	s.replace(items, parseRV(meta.ResourceVersion), meta.APIVersion, meta.ItemKind())
	return nil
}

func (s *Store) watch(ctx context.Context, up Upstream) error {
	timeout := 300 + rand.IntN(300) // as client-go spreads its watches: 5–10 minutes
	path := s.res.url("watch=1&allowWatchBookmarks=true&timeoutSeconds=" + strconv.Itoa(timeout) +
		"&resourceVersion=" + strconv.FormatUint(s.ResourceVersion(), 10))
	err := listwatch.Watch(ctx, up.Fetch, path, up.Silence, func(ev wire.WatchEvent) error {
		switch ev.Type {
		case wire.EventError:
			return errGone // the apiserver's in-stream error is its 410 Expired
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
		if !s.Synced() {
			return errTooLarge // it went past its bounds: list again (and again, with the back-off)
		}
		return nil
	})
	if errors.Is(err, errTooLarge) {
		maxN, maxB := s.bounds()
		return fmt.Errorf("pool: watch %s: past %d objects or %d bytes; its clients read the cloud: %w", s.res, maxN, maxB, errTooLarge)
	}
	if errors.Is(err, errGone) || listwatch.IsGone(err) {
		s.expire()
		return errGone
	}
	if err != nil {
		return fmt.Errorf("pool: watch %s from %s: %w", s.res, up.Name, err)
	}
	return nil // the watch's timeout: watch again from where the store is
}
