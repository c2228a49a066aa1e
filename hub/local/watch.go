package local

import (
	"bufio"
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
	// The initial events are a list: they go out through the list's buffer, flushed when full
	// and at their bookmark, not one flush per object; the buffer goes with them.
	bw := &burstWriter{ResponseWriter: w, bw: bufio.NewWriterSize(w, listBuffer)}
	ww := wire.StartWatch(bw, f.protobuf, p.writeTimeout()) // a client that stops reading goes
	defer ww.End()
	ww.APIVersion, ww.Kind = pl.av, pl.kind
	// The initial events are read and sent one object at a time; the resourceVersion is the
	// newest of them (without initial events, of a pass that reads them too).
	gone := errors.New("local: watch client gone")
	release, ok := p.acquire(r, req)
	if !ok {
		return
	}
	rev := p.revisions(ri)
	var rewrite func([]byte) []byte
	if rev != nil && ri.SendInitialEvents {
		rewrite = rev.Served()
	}
	var fl *follower
	if rev == nil {
		fl = p.newFollower(ri)
	}
	res, err := p.each(pl, func(it cache.Item) error {
		fl.saw(it)
		if !ri.SendInitialEvents {
			return nil
		}
		obj, err := wire.Convert(rewritten(rewrite, it.Body), f.protobuf)
		if err != nil {
			return nil
		}
		if !ww.Send(wire.EventAdded, obj) {
			return gone
		}
		return nil
	})
	release()
	if err != nil {
		return
	}
	rv := res.ResourceVersion
	if ri.SendInitialEvents && ww.Kind != "" && !ww.Bookmark(rv, true) || !ww.Flush() {
		return
	}
	bw.bw = nil

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
		var revised, applied <-chan struct{}
		send := func(typ string, obj []byte) bool { return ww.Send(typ, obj) && ww.Flush() }
		if rev != nil {
			if revised, ok = p.revise(r, req, pl, rev, f.protobuf, send); !ok {
				return
			}
		}
		if fl != nil {
			if applied, ok = p.follow(r, req, pl, fl, f.protobuf, send); !ok {
				return
			}
		}
		select {
		case <-revised:
		case <-applied:
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

// burstWriter buffers what is written while bw is set (a watch's initial events); FlushError
// writes the buffer out and flushes the response, so http.ResponseController finds it.
type burstWriter struct {
	http.ResponseWriter
	bw *bufio.Writer
}

func (b *burstWriter) Write(p []byte) (int, error) {
	if b.bw != nil {
		return b.bw.Write(p)
	}
	return b.ResponseWriter.Write(p)
}

func (b *burstWriter) FlushError() error {
	if b.bw != nil {
		if err := b.bw.Flush(); err != nil {
			return err
		}
	}
	return http.NewResponseController(b.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection (write deadlines).
func (b *burstWriter) Unwrap() http.ResponseWriter { return b.ResponseWriter }
