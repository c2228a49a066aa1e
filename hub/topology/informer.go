package topology

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync"
	"time"

	"nodehub/listwatch"
	"nodehub/wire"
)

// informer lists path and then watches it from the list's resourceVersion, again and again (with
// a back-off after failures) until ctx ends: listwatch's loop. A watch that ends is resumed from
// the last resourceVersion it delivered (an event's or a bookmark's); only a 410 (or the first
// time) lists again, from the apiserver's watch cache — a hub coming back after an outage does
// not list every service again. tried, if set, is told once, when the first list ended, however.
// shared, if set, is asked first each time: a Follow it offers is followed instead (no request).
func (t *Source) informer(ctx context.Context, path, resource string, shared func(context.Context) Follow, tried func(), onList func([][]byte), onEvent func(wire.WatchEvent)) {
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	in := &informing{t: t, path: path, sep: sep, resource: resource, shared: shared, tried: tried, onList: onList, onEvent: onEvent}
	listwatch.Loop{First: time.Second, Most: 30 * time.Second, Refused: time.Minute, Wake: t.Returned}.Run(ctx, in.pass)
}

// informing is one informer's state across its passes.
type informing struct {
	t         *Source
	path, sep string
	resource  string
	shared    func(context.Context) Follow
	tried     func()
	onList    func([][]byte)
	onEvent   func(wire.WatchEvent)
	rv        string // where the next watch resumes; "" lists first
	once      sync.Once
}

// pass is one round of the loop: follow the shared copy if one is offered, else list (when
// there is no resourceVersion to resume from) and watch.
func (in *informing) pass(ctx context.Context) (<-chan struct{}, error) {
	if in.shared != nil {
		if follow := in.shared(ctx); follow != nil {
			return nil, in.follow(ctx, follow)
		}
	}
	var err error
	if in.rv == "" {
		err = in.list(ctx)
	}
	if err == nil {
		err = in.watch(ctx)
	}
	if err != nil {
		in.t.log.Debug("topology: "+in.resource+" list/watch", "err", err)
	}
	return nil, err
}

// follow hands the shared copy's list and events on until it ends.
func (in *informing) follow(ctx context.Context, follow Follow) error {
	in.rv = "" // back on fetch, it lists again: the followed copy's resourceVersion is not its
	err := follow(ctx, func(items [][]byte) {
		in.onList(items)
		if in.tried != nil {
			in.once.Do(in.tried)
		}
	}, in.onEvent)
	if err != nil {
		in.t.log.Debug("topology: "+in.resource+" from the shared store", "err", err)
	}
	return err
}

// list lists the resource from the apiserver's watch cache and hands the items on.
func (in *informing) list(ctx context.Context) error {
	var items [][]byte
	meta, err := listwatch.List(ctx, in.t.fetch, in.path+in.sep+"resourceVersion=0", func(raw []byte) error { items = append(items, raw); return nil })
	if in.tried != nil && ctx.Err() == nil {
		in.once.Do(in.tried)
	}
	if err == nil {
		in.onList(items)
		in.rv = meta.ResourceVersion
	}
	return err
}

// watch watches from the resourceVersion last seen, handing each event on (bookmarks only move
// the resourceVersion); a 410, in the stream or as the answer, lists again next time.
func (in *informing) watch(ctx context.Context) error {
	err := listwatch.Watch(ctx, in.t.fetch, in.path+in.sep+"watch=true&allowWatchBookmarks=true&resourceVersion="+url.QueryEscape(in.rv), 0, func(ev wire.WatchEvent) error {
		if ev.Type == wire.EventError {
			in.rv = "" // the apiserver's in-stream 410: list again
			return errors.New("error event")
		}
		if m, err := wire.ExtractMeta(ev.Object, in.resource); err == nil && m.ResourceVersion != "" {
			in.rv = m.ResourceVersion
		}
		if ev.Type != wire.EventBookmark {
			in.onEvent(ev)
		}
		return nil
	})
	if listwatch.IsGone(err) {
		in.rv = ""
	}
	return err
}
