package local

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"time"

	"nodehub/cache"
	"nodehub/pool"
	"nodehub/wire"
)

// watch keeps an offline watch open: the cached objects as ADDED and the initial-events-end
// bookmark when the client asked for initial events, then BOOKMARKs (when allowed) so the client
// does not re-list in a loop, until the cloud is back (the client then re-lists from the cloud),
// timeoutSeconds, or the client leaves.
func (p *Proxy) watch(w http.ResponseWriter, r *http.Request, req *Request) {
	pl, protobuf, ok := p.watchPlan(w, req)
	if !ok {
		return
	}
	// The initial events are a list: they go out through the list's buffer, flushed when full
	// and at their bookmark, not one flush per object; the buffer goes with them.
	bw := &burstWriter{ResponseWriter: w, bw: bufio.NewWriterSize(w, listBuffer)}
	ww := wire.StartWatch(bw, protobuf, p.writeTimeout()) // a client that stops reading goes
	defer ww.End()
	ww.APIVersion, ww.Kind = pl.av, pl.kind
	lw := &offlineWatch{p: p, r: r, req: req, pl: pl, ww: ww, protobuf: protobuf}
	rv, ok := lw.initial()
	if !ok {
		return
	}
	bw.bw = nil
	lw.keep(rv)
}

// watchPlan returns the watch's list plan and whether it is served in protobuf; false when the
// client has its answer already (an error).
func (p *Proxy) watchPlan(w http.ResponseWriter, req *Request) (*listPlan, bool, bool) {
	ri := req.Info
	f, accepted := choose(req.Accept)
	if !accepted || f.meta {
		f = format{protobuf: accepted && f.protobuf}
	}
	pl, ok := p.planOrAnswer(w, req)
	if !ok {
		return nil, false, false
	}
	if ri.SendInitialEvents && !p.kubeletMayList(w, req, pl) {
		return nil, false, false // a watch-list is kubelet's list since client-go 1.35: the same rules hold
	}
	if ri.SendInitialEvents && pl.kind == "" {
		// Without the items' type there is no bookmark to end the initial events with, and a
		// client would wait for it until its timeout: a clear error now, so it falls back.
		p.status(w, req, http.StatusServiceUnavailable, fmt.Sprintf("nodehub: the cloud is unreachable and the cached list of %s does not name its kind", resourceName(ri)))
		return nil, false, false
	}
	return pl, pl.format(f, req.Accept), true
}

// offlineWatch is one offline watch being answered.
type offlineWatch struct {
	p        *Proxy
	r        *http.Request
	req      *Request
	pl       *listPlan
	ww       *wire.WatchWriter
	protobuf bool
	rev      pool.Revisions // the endpoint corrections, or nil
	fl       *follower      // the writes applied offline it follows, or nil
}

// initial reads the cached objects one at a time, sends them as ADDED when the client asked for
// initial events, then their bookmark, and flushes; it returns the resourceVersion, the newest of
// them (without initial events, of a pass that reads them too), and false when the client is gone.
func (lw *offlineWatch) initial() (string, bool) {
	p, ri := lw.p, lw.req.Info
	gone := errors.New("local: watch client gone")
	release, ok := p.acquire(lw.r, lw.req)
	if !ok {
		return "", false
	}
	lw.rev = p.revisions(ri)
	var rewrite func([]byte) []byte
	if lw.rev != nil && ri.SendInitialEvents {
		rewrite = lw.rev.Served()
	}
	if lw.rev == nil {
		lw.fl = p.newFollower(ri)
	}
	res, err := p.each(lw.pl, func(it cache.Item) error {
		lw.fl.saw(it)
		if !ri.SendInitialEvents {
			return nil
		}
		obj, err := wire.Convert(rewritten(rewrite, it.Body), lw.protobuf)
		if err != nil {
			return nil
		}
		if !lw.ww.Send(wire.EventAdded, obj) {
			return gone
		}
		return nil
	})
	release()
	if err != nil {
		return "", false
	}
	rv := res.ResourceVersion
	if ri.SendInitialEvents && lw.ww.Kind != "" && !lw.ww.Bookmark(rv, true) || !lw.ww.Flush() {
		return "", false
	}
	return rv, true
}

// keep keeps the watch open after its initial events: what changes offline is sent as it
// changes, a bookmark at rv every BookmarkInterval, until the cloud is back, the watch's timeout
// or the client leaves.
func (lw *offlineWatch) keep(rv string) {
	p, ri, ww := lw.p, lw.req.Info, lw.ww
	timeout := p.WatchTimeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	interval := p.BookmarkInterval
	if interval <= 0 {
		interval = 5 * time.Second
	}
	tick := func() bool {
		return !ri.AllowWatchBookmarks || ww.Kind == "" || ww.Bookmark(rv, false) && ww.Flush()
	}
	wire.KeepWatch(lw.r.Context(), ri.WatchTimeout(timeout), interval, lw.pass, tick)
}

// pass sends what changed offline since the last pass (the endpoint corrections, the writes
// applied offline) and returns what wakes the next; false ends the watch: the client is gone,
// or the cloud is back (the client then re-lists from it).
func (lw *offlineWatch) pass() (wire.Wakes, bool) {
	p := lw.p
	var changed <-chan struct{}
	if p.Changed != nil {
		changed = p.Changed()
	}
	if p.Online != nil && p.Online() {
		return wire.Wakes{}, false
	}
	var revised, applied <-chan struct{}
	ok := true
	send := func(typ string, obj []byte) bool { return lw.ww.Send(typ, obj) && lw.ww.Flush() }
	if lw.rev != nil {
		if revised, ok = p.revise(lw.r, lw.req, lw.pl, lw.rev, lw.protobuf, send); !ok {
			return wire.Wakes{}, false
		}
	}
	if lw.fl != nil {
		if applied, ok = p.follow(lw.r, lw.req, lw.pl, lw.fl, lw.protobuf, send); !ok {
			return wire.Wakes{}, false
		}
	}
	return wire.Wakes{revised, applied, changed}, true
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
