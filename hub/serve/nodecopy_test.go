package serve

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"nodehub/wire"
)

// The copy is fresh only with an open watch that spoke within nodeFresh, and online.
func TestNodeCopyFreshness(t *testing.T) {
	var c nodeCopy
	now := time.Now()
	c.keep([]byte(testNode(3, "v1")))
	if c.fresh(now, true) != nil {
		t.Fatal("fresh without a watch")
	}
	c.open, c.heard = 1, now
	if c.fresh(now, true) == nil || c.fresh(now, false) != nil || c.fresh(now.Add(nodeFresh+time.Second), true) != nil {
		t.Fatal("freshness: want fresh online within nodeFresh only")
	}
	c.keep([]byte(testNode(2, "old")))
	if !strings.Contains(string(c.fresh(now, true)), `"v1"`) {
		t.Fatal("an older copy replaced a newer one")
	}
}

// testNode is the node node-a at resourceVersion rv with a label version=v.
func testNode(rv int, v string) string {
	return fmt.Sprintf(`{"kind":"Node","apiVersion":"v1","metadata":{"name":"node-a","uid":"n1","resourceVersion":"%d","labels":{"version":%q}},"status":{"conditions":[{"type":"Ready","status":"True"}]}}`, rv, v)
}

// The cloud's answer to kubelet's GET of its node is read once: the copy keeps it and it is left
// whole in the answer (wire.Whole) for the Autonomy condition and the cache, which read its bytes
// without reading or copying it again; the cloud's body is read to its end and closed.
func TestNodeCopyLeavesTheAnswerWhole(t *testing.T) {
	var c nodeCopy
	raw := []byte(testNode(3, "v1"))
	cloud := &closeCounter{Reader: bytes.NewReader(raw)}
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, ContentLength: int64(len(raw)), Body: cloud}
	c.fromGet(resp)
	w, ok := resp.Body.(*wire.Whole)
	if !ok || !bytes.Equal(w.Bytes(), raw) || cloud.closed != 1 {
		t.Fatalf("body %T, closed %d", resp.Body, cloud.closed)
	}
	if kept := c.raw; len(kept) == 0 || &kept[0] != &w.Bytes()[0] {
		t.Fatal("the copy is not the answer's bytes")
	}
	// Cut short: what arrived passes on, then the error.
	cut := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, ContentLength: int64(len(raw)) + 5, Body: io.NopCloser(bytes.NewReader(raw))}
	c.fromGet(cut)
	if b, err := io.ReadAll(cut.Body); !bytes.Equal(b, raw) || err != nil {
		t.Fatalf("a cut answer: %q, %v", b, err)
	}
}

type closeCounter struct {
	io.Reader
	closed int
}

func (c *closeCounter) Close() error { c.closed++; return nil }
