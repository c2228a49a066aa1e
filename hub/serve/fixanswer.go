package serve

import (
	"bytes"
	"io"
	"net/http"

	"nodehub/hub/remote"
)

// maxStatusAnswer bounds the cloud's answer to a status write the Fixer reads (a pod).
const maxStatusAnswer = 1 << 20

// fixAnswer shows the endpoint Fixer the cloud's answer to a write it wants to read (kubelet's
// status write of a pod it corrects: the cloud has kubelet's report now), as the answer streams
// to kubelet.
func (p *Pipeline) fixAnswer(q *proxyRequest, resp *http.Response) {
	if !p.Fix.WantsAnswer(q.ri, q.id == remote.Node, resp.StatusCode, resp.Header.Get("Content-Encoding")) {
		return
	}
	resp.Body = &captureBody{ReadCloser: resp.Body, done: p.Fix.ReportedOnline}
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
