package local

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"nodehub/cache"
	"nodehub/wire"
)

// watch keeps an offline watch open: the cached objects as ADDED and the initial-events-end
// bookmark when the client asked for initial events, then BOOKMARKs (when allowed) so the client
// does not re-list in a loop, until the cloud is back (the client then re-lists from the cloud),
// timeoutSeconds, or the client leaves.
func (p *Proxy) watch(w http.ResponseWriter, r *http.Request, req *Request) {
	ri := req.Info
	f, accepted := choose(req.Accept)
	if !accepted || f.meta {
		f = format{protobuf: accepted && f.protobuf}
	}
	pl, ok := p.planOrAnswer(w, req)
	if !ok {
		return
	}
	if ri.SendInitialEvents && !p.kubeletMayList(w, req, pl) {
		return // a watch-list is kubelet's list since client-go 1.35: the same rules hold
	}
	if ri.SendInitialEvents && pl.kind == "" {
		// Without the items' type there is no bookmark to end the initial events with, and a
		// client would wait for it until its timeout: a clear error now, so it falls back.
		p.status(w, req, http.StatusServiceUnavailable, fmt.Sprintf("nodehub: the cloud is unreachable and the cached list of %s does not name its kind", resourceName(ri)))
		return
	}
	f.protobuf = pl.format(f, req.Accept)
	ww := wire.StartWatch(w, f.protobuf, p.writeTimeout()) // a client that stops reading goes
	defer ww.End()
	ww.APIVersion, ww.Kind = pl.av, pl.kind
	send := func(typ string, obj []byte) bool { return ww.Send(typ, obj) && ww.Flush() }
	// The initial events are read and sent one object at a time; the resourceVersion is the
	// newest of them (without initial events, of a pass that reads them too).
	gone := errors.New("local: watch client gone")
	release, ok := p.acquire(r, req)
	if !ok {
		return
	}
	res, err := p.each(pl, func(it cache.Item) error {
		if !ri.SendInitialEvents {
			return nil
		}
		obj, err := wire.Convert(it.Body, f.protobuf)
		if err != nil {
			return nil
		}
		if !send(wire.EventAdded, obj) {
			return gone
		}
		return nil
	})
	release()
	if err != nil {
		return
	}
	rv := res.ResourceVersion
	if ri.SendInitialEvents {
		if ww.Kind != "" && !(ww.Bookmark(rv, true) && ww.Flush()) {
			return
		}
	} else {
		ww.Flush()
	}

	timeout := p.WatchTimeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	interval := p.BookmarkInterval
	if interval <= 0 {
		interval = 5 * time.Second
	}
	end := time.NewTimer(ri.WatchTimeout(timeout))
	defer end.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		var changed <-chan struct{}
		if p.Changed != nil {
			changed = p.Changed()
		}
		if p.Online != nil && p.Online() {
			return // the cloud is back: end, so the client re-lists from it
		}
		select {
		case <-r.Context().Done():
			return
		case <-end.C:
			return
		case <-changed:
		case <-tick.C:
			if ri.AllowWatchBookmarks && ww.Kind != "" && !(ww.Bookmark(rv, false) && ww.Flush()) {
				return
			}
		}
	}
}
