package serve

import (
	"fmt"
	"strings"
	"testing"
	"time"
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
