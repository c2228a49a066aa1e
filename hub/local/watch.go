package local

import (
	"net/http"
	"time"

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
	l, ok := p.listOrAnswer(w, req)
	if !ok {
		return
	}
	av, kind := "", ""
	if l.res.Record != nil {
		av, kind = l.res.Record.APIVersion, l.res.Record.Kind
	}
	if len(l.items) > 0 {
		av, kind = l.items[0].Header.APIVersion, l.items[0].Header.Kind
		if _, got, err := encodeItem(l.items[0].Body, f, req.Accept); err == nil {
			f.protobuf = got
		}
	}
	rv := l.res.ResourceVersion

	ct := wire.MediaJSON
	frame := wire.EncodeJSONWatchEvent
	if f.protobuf {
		ct, frame = wire.MediaProtobufWatch, wire.EncodeProtoWatchEvent
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "no-cache, private")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(ev wire.WatchEvent) bool {
		if _, err := w.Write(frame(ev)); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if ri.SendInitialEvents {
		for _, it := range l.items {
			obj, err := wire.Convert(it.Body, f.protobuf)
			if err != nil {
				continue
			}
			if !send(wire.WatchEvent{Type: wire.EventAdded, Object: obj}) {
				return
			}
		}
		if kind != "" && !send(wire.WatchEvent{Type: wire.EventBookmark, Object: wire.BookmarkObject(av, kind, rv, true, f.protobuf)}) {
			return
		}
	} else {
		_ = rc.Flush()
	}
	l = nil // the objects are sent; hold nothing while the watch waits

	timeout := p.WatchTimeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	if ri.TimeoutSeconds > 0 {
		timeout = time.Duration(ri.TimeoutSeconds) * time.Second
	}
	interval := p.BookmarkInterval
	if interval <= 0 {
		interval = 5 * time.Second
	}
	end := time.NewTimer(timeout)
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
			if ri.AllowWatchBookmarks && kind != "" {
				if !send(wire.WatchEvent{Type: wire.EventBookmark, Object: wire.BookmarkObject(av, kind, rv, false, f.protobuf)}) {
					return
				}
			}
		}
	}
}
