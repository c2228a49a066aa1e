package serve

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"nodehub/hub/autonomy"
	"nodehub/wire"
)

// nodeFresh is how recently a watch of the node must have said something (an event or a
// bookmark) for the hub's copy of the node to count as fresh. The apiserver's watch cache sends
// every watch a bookmark once a minute (k8s.io/apiserver's defaultBookmarkFrequency), so a live
// watch is never silent for longer; 90 s leaves room for a loaded server.
const nodeFresh = 90 * time.Second

// nodeCopy is the node as the cloud last sent it to this hub — kubelet's own GETs of it and
// every event of a watch of it (kubelet's and kube-proxy's informers watch their node,
// fieldSelector metadata.name=<node>) — so kubelet's GET of its node every nodeStatusUpdateFrequency
// (10 s: about 8 KB each, 70 MB a day) is answered here instead of crossing the link.
//
// The copy answers only while it is as fresh as the cloud's own answer would be:
//   - the cloud is reachable (the health checker's verdict: probes every heartbeat);
//   - a watch of the node with the node's identity is open through the hub right now, its answer
//     passed unfiltered (so the copy holds the cloud's bytes);
//   - that watch said something (an event or a bookmark) within nodeFresh.
//
// A watch that delivers every change of the node as it happens is what kubelet's own informer
// trusts; kubelet's GET itself asks resourceVersion=0 (the apiserver's watch cache, equally
// behind). Otherwise, and for anything but a plain GET (another resourceVersion, a partial
// object), the GET goes to the cloud as before and its answer refreshes the copy.
type nodeCopy struct {
	mu    sync.Mutex
	raw   []byte // the node as the cloud sent it (JSON or the protobuf envelope); nil: none
	rv    uint64
	open  int       // watches of the node being proxied now
	heard time.Time // when one of them last delivered an event or a bookmark (or started)
}

// keep records a newer copy of the node.
func (c *nodeCopy) keep(raw []byte) {
	v, ok := wire.VersionOf(raw) // the metadata alone: a compare, not a decode
	if !ok {
		return
	}
	rv, _ := strconv.ParseUint(v.ResourceVersion, 10, 64)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.raw == nil || rv >= c.rv {
		c.raw, c.rv = raw, rv
	}
}

// fresh returns the copy when it may answer (see nodeCopy), else nil.
func (c *nodeCopy) fresh(now time.Time, online bool) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !online || c.open == 0 || c.raw == nil || now.Sub(c.heard) > nodeFresh {
		return nil
	}
	return c.raw
}

// fromGet keeps the cloud's answer to a GET of the node (read whole, bounded: a node bigger than
// autonomy.MaxNodeBody passes as it is; the body is left whole for the Autonomy condition and the
// cache).
func (c *nodeCopy) fromGet(resp *http.Response) {
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "" || resp.ContentLength > autonomy.MaxNodeBody {
		return
	}
	if w, ok := wire.ReadWhole(resp, autonomy.MaxNodeBody); ok {
		c.keep(w.Bytes())
	}
}

// track follows a watch of the node as it streams to its client: open while it lasts, each event
// kept, each event or bookmark a sign of life.
func (c *nodeCopy) track(resp *http.Response) {
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "" {
		return
	}
	c.mu.Lock()
	c.open++
	c.heard = time.Now()
	c.mu.Unlock()
	sp := wire.NewWatchSplitter(wire.ParseMediaType(resp.Header.Get("Content-Type")), func(ev wire.WatchEvent) error {
		switch ev.Type {
		case wire.EventAdded, wire.EventModified:
			c.keep(bytes.Clone(ev.Object))
		case wire.EventDeleted:
			c.mu.Lock()
			c.raw = nil
			c.mu.Unlock()
		case wire.EventBookmark:
		default:
			return nil
		}
		c.mu.Lock()
		c.heard = time.Now()
		c.mu.Unlock()
		return nil
	})
	resp.Body = &nodeWatchBody{ReadCloser: resp.Body, c: c, sp: sp}
}

// nodeWatchBody passes a watch of the node through, feeding what passes to the copy.
type nodeWatchBody struct {
	io.ReadCloser
	c      *nodeCopy
	sp     wire.WatchSplitter
	broken bool // the splitter failed: the copy stops learning from this watch
	once   sync.Once
}

func (b *nodeWatchBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 && !b.broken {
		if _, perr := b.sp.Write(p[:n]); perr != nil {
			b.broken = true
			b.end()
		}
	}
	if err != nil {
		b.end()
	}
	return n, err
}

func (b *nodeWatchBody) Close() error {
	b.end()
	return b.ReadCloser.Close()
}

func (b *nodeWatchBody) end() {
	b.once.Do(func() {
		b.c.mu.Lock()
		b.c.open--
		b.c.mu.Unlock()
	})
}

// isOwnNodeGet reports whether a request is kubelet's GET of this node with the node's identity.
func (p *Pipeline) isOwnNodeGet(ri *wire.RequestInfo) bool {
	return ri.IsResource && ri.Verb == wire.VerbGet && ri.Group == "" && ri.Resource == "nodes" && ri.Subresource == "" &&
		ri.Name == p.NodeName && ri.Component == "kubelet"
}

// isOwnNodeWatch reports whether a request is a watch of exactly this node (by name).
func (p *Pipeline) isOwnNodeWatch(ri *wire.RequestInfo) bool {
	return ri.IsResource && ri.Verb == wire.VerbWatch && ri.Group == "" && ri.Resource == "nodes" && ri.Subresource == "" &&
		ri.Namespace == "" && ri.LabelSelector == "" && ri.Accept.As == "" &&
		(ri.FieldSelector == "metadata.name="+p.NodeName || ri.Name == p.NodeName)
}

// serveNodeCopy answers kubelet's GET of its node from the copy when it is fresh, with the
// Autonomy condition set as on the cloud's answer; false when the cloud must answer.
func (p *Pipeline) serveNodeCopy(q *proxyRequest) bool {
	ri := q.ri
	if ri.Accept.As != "" || ri.ResourceVersion != "" && ri.ResourceVersion != "0" {
		return false
	}
	raw := p.node.fresh(time.Now(), p.Cloud.Online())
	if raw == nil {
		return false
	}
	pb := ri.Accept.IsProtobuf()
	out, err := wire.Convert(raw, pb)
	if err != nil {
		return false
	}
	if p.Auto != nil {
		out = p.Auto.Node(out)
	}
	p.Metrics.NodeFromWatch()
	h := q.w.Header()
	h.Set("Content-Type", wire.MediaJSON)
	if pb {
		h.Set("Content-Type", wire.MediaProtobuf)
	}
	h.Set("Content-Length", strconv.Itoa(len(out)))
	h.Set("Cache-Control", "no-cache, private")
	q.w.WriteHeader(http.StatusOK)
	_, _ = q.w.Write(out)
	return true
}
