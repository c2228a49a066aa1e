package hub

import (
	"bytes"
	"io"
	"net/http"

	"nodehub/filter"
	"nodehub/hub/remote"
	"nodehub/pool"
	"nodehub/wire"
)

// The pipeline's side of the endpoint corrections (hub/endpointfix; fed in fixendpoints.go):
// every client's EndpointSlice reads through the Fixer's filter (chainFor), the shared stores'
// watches with its revisions (servePool), and the cloud's answer to kubelet's status write of a
// pod it corrects shown to it (respond).

// fixChain adds the corrections to a request's chain (every client's reads of EndpointSlices):
// always for the shared stores, whose watches outlive an outage; for the cloud only while some
// endpoint is corrected (a chain makes a list answer be read whole before it is sent).
func (p *pipeline) fixChain(q *proxyRequest, c *filter.Chain) *filter.Chain {
	if p.fix == nil || q.store == nil && !p.fix.Active() {
		return c
	}
	return filter.With(c, q.ri, p.fix.Filter())
}

// fixRevisions are a shared store's watch's revisions, or nil.
func (p *pipeline) fixRevisions(ri *wire.RequestInfo) pool.Revisions {
	if p.fix == nil || !isSlices(ri) || ri.Verb != wire.VerbWatch {
		return nil
	}
	return p.fix.NewWatch()
}

// sendingStatusWrite tells the Fixer that kubelet's status write of a pod it corrects leaves for
// the cloud, until the request ends (the cloud's slice saying what it says may arrive before the
// answer does: hub/endpointfix's sending.go).
func (p *pipeline) sendingStatusWrite(q *proxyRequest) {
	ri := q.ri
	if p.fix == nil || !p.fix.Active() || q.id != remote.Node || ri.Component != "kubelet" || !isPods(ri) || ri.Subresource != "status" ||
		ri.Verb != wire.VerbPatch && ri.Verb != wire.VerbUpdate {
		return
	}
	q.onEnd(p.fix.Sending(ri.Namespace, ri.Name))
}

// maxStatusAnswer bounds the cloud's answer to a status write the Fixer reads (a pod).
const maxStatusAnswer = 1 << 20

// watchStatusWrite shows the Fixer the cloud's answer to kubelet's status write of a pod it
// corrects: the cloud has kubelet's report now. Nothing is read when nothing is corrected.
func (p *pipeline) watchStatusWrite(q *proxyRequest, resp *http.Response) {
	ri := q.ri
	if p.fix == nil || !p.fix.Active() || q.id != remote.Node || ri.Component != "kubelet" || !isPods(ri) || ri.Subresource != "status" ||
		ri.Verb != wire.VerbPatch && ri.Verb != wire.VerbUpdate || resp.StatusCode/100 != 2 || resp.Header.Get("Content-Encoding") != "" {
		return
	}
	resp.Body = &captureBody{ReadCloser: resp.Body, done: p.fix.ReportedOnline}
}

// captureBody passes a body through and hands it, whole, to done at its end (nothing past
// maxStatusAnswer).
type captureBody struct {
	io.ReadCloser
	buf  bytes.Buffer
	over bool
	done func([]byte)
}

func (c *captureBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	if !c.over {
		if c.buf.Len()+n > maxStatusAnswer {
			c.over, c.buf = true, bytes.Buffer{}
		} else {
			c.buf.Write(p[:n])
		}
	}
	if err == io.EOF && !c.over && c.done != nil {
		c.done(bytes.TrimSpace(c.buf.Bytes()))
		c.done = nil
	}
	return n, err
}
