package local

import (
	"errors"
	"net/http"

	"nodehub/cache"
	"nodehub/wire"
)

// A small protobuf list (kubelet's pods: ~0.2–1 MB) is read from the cache once and held while
// it is written, instead of read three times (kubelet's check that it may be given the list, the
// sizing pass, the writing pass: a protobuf list announces its length first). Past gatherMax the
// list is streamed as before; at most gatherers lists are held at once, so what they hold is
// bounded whoever asks (a list that finds none free is streamed).
const (
	gatherMax = 1 << 20
	gatherers = 4
)

// gathered is a list read whole: each item's message, in order, and what the read found.
type gathered struct {
	res   cache.ListResult
	msgs  [][]byte
	total int // the items' bytes in the list (wire.ProtoListItemLen of each)
}

// gatheredProtoList answers a protobuf list from one read of the cache when it is small enough,
// and reports false (nothing written) when it must be streamed instead.
func (p *Proxy) gatheredProtoList(w http.ResponseWriter, req *Request, pl *listPlan, rewrite func([]byte) []byte) bool {
	p.gatherOnce.Do(func() { p.gathering = make(chan struct{}, gatherers) })
	select {
	case p.gathering <- struct{}{}:
		defer func() { <-p.gathering }()
	default:
		return false
	}
	g, err := p.gather(pl, rewrite)
	if errors.Is(err, errTooLarge) {
		return false
	}
	if err != nil {
		p.status(w, req, http.StatusInternalServerError, "nodehub: "+err.Error())
		return true
	}
	if !p.kubeletMayUse(w, req, pl, g.res) {
		return true
	}
	p.writeGathered(w, pl, g)
	return true
}

// errTooLarge stops a gather past gatherMax.
var errTooLarge = errors.New("local: list too large to hold")

// gather reads the list's items once (errTooLarge: they pass gatherMax).
func (p *Proxy) gather(pl *listPlan, rewrite func([]byte) []byte) (*gathered, error) {
	g := &gathered{}
	res, err := p.each(pl, func(it cache.Item) error {
		msg, err := wire.ProtoItem(rewritten(rewrite, it.Body))
		if err != nil {
			p.log().Debug("offline list: item skipped", "name", it.Header.Name, "err", err)
			return nil
		}
		if g.total += wire.ProtoListItemLen(len(msg)); g.total > gatherMax {
			return errTooLarge
		}
		g.msgs = append(g.msgs, msg)
		return nil
	})
	g.res = res
	return g, err
}

// writeGathered writes a list read whole.
func (p *Proxy) writeGathered(w http.ResponseWriter, pl *listPlan, g *gathered) {
	defer clearWriteDeadline(w)
	meta := wire.ProtoListMeta(g.res.ResourceVersion)
	listLen := len(meta) + g.total
	head, tail := wire.ProtoListHead(pl.av, pl.kind, listLen), wire.ProtoListTail()
	bw := p.startList(w, format{protobuf: true}.contentType(false), len(head)+listLen+len(tail))
	_, _ = bw.Write(head)
	_, _ = bw.Write(meta)
	for _, msg := range g.msgs {
		if _, err := bw.Write(wire.ProtoListItemHead(len(msg))); err != nil {
			panic(http.ErrAbortHandler)
		}
		if _, err := bw.Write(msg); err != nil {
			panic(http.ErrAbortHandler)
		}
	}
	_, _ = bw.Write(tail)
	_ = bw.Flush()
}
