package autonomy

import (
	"io"
	"net/http"

	"nodehub/wire"
)

// WatchResponse sets the condition in the cloud's answer to a watch of the node named node (see
// Watch); an answer that is not a plain 200 in JSON or protobuf passes as it is.
func (a *Condition) WatchResponse(resp *http.Response, node string) {
	media := wire.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "" || media.Type != wire.MediaJSON && media.Type != wire.MediaProtobuf {
		return
	}
	resp.Body = a.Watch(resp.Body, media, node)
}

// Watch follows a watch of the node named node as it streams to its client (kubelet's informer,
// fieldSelector metadata.name=<node>, a watch-list's initial events included): each ADDED or
// MODIFIED event of that node is evaluated as kubelet's GET of it is (Node): the event is passed
// on with the condition set, re-encoded only when it had to change, and the change is written to
// the cloud. So the condition follows the node as the watch delivers it, whether kubelet reads its
// node with a GET or from its informer (v1.37). Other events, and other objects, pass as the
// cloud's bytes. A stream the splitter cannot read ends with an ERROR event carrying a 502 Status,
// after the events before it: the client watches again.
func (a *Condition) Watch(rc io.ReadCloser, media wire.MediaType, node string) io.ReadCloser {
	pb := media.IsProtobuf()
	return wire.RewriteWatch(rc, media, func(ev wire.WatchEvent) []byte {
		if ev.Type != wire.EventAdded && ev.Type != wire.EventModified {
			return ev.Frame
		}
		if m, err := wire.ExtractMeta(ev.Object, "nodes"); err != nil || m.Name != node {
			return ev.Frame
		}
		if out := a.Node(ev.Object); !sameBytes(out, ev.Object) {
			return wire.WatchFrame(wire.WatchEvent{Type: ev.Type, Object: out}, pb)
		}
		return ev.Frame
	})
}

// sameBytes reports whether b is a itself (Node returns its argument when nothing changed).
func sameBytes(a, b []byte) bool { return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0]) }
