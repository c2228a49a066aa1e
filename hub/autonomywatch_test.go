package hub

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// nodeAnnotated is the node node-a at resourceVersion rv, with the autonomy annotation when on and
// the given Autonomy condition status ("" for none).
func nodeAnnotated(rv int, on bool, autonomy string) string {
	ann, cond := "", ""
	if on {
		ann = `,"annotations":{"node.beta.openyurt.io/autonomy":"true"}`
	}
	if autonomy != "" {
		cond = fmt.Sprintf(`,{"type":"Autonomy","status":%q,"reason":"r"}`, autonomy)
	}
	return fmt.Sprintf(`{"kind":"Node","apiVersion":"v1","metadata":{"name":"node-a","uid":"n1","resourceVersion":"%d"%s},"status":{"conditions":[{"type":"Ready","status":"True"}%s]}}`, rv, ann, cond)
}

// watchNodeA opens kubelet's watch of its node node-a (JSON, as its informer's) through the hub.
func (f *proxyFixture) watchNodeA(t *testing.T, ctx context.Context) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.url+"/api/v1/nodes?fieldSelector=metadata.name%3Dnode-a&watch=true&allowWatchBookmarks=true&resourceVersion=5", nil)
	req.Header.Set("User-Agent", kubelet)
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// The Autonomy condition follows the node as kubelet's own watch of it delivers it (v1.37's
// kubelet reads its node from its informer, never with a GET): an event of the annotated node
// reaches kubelet with the condition True and True is written to the cloud, without any GET of
// the node; the cloud's echo passes as it is, unwritten; the annotation removed, False.
func TestAutonomyFollowsTheNodesWatch(t *testing.T) {
	f := newProxyFixture(t, nil)
	patches := make(chan string, 8)
	f.cloud.handle = func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodPatch || r.URL.Path != "/api/v1/nodes/node-a/status" {
			return false
		}
		b, _ := io.ReadAll(r.Body)
		patches <- string(b)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, nodeA(100, "v1"))
		return true
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.hub.auto.Run(ctx) }()
	defer func() { cancel(); <-done }()
	resp := f.watchNodeA(t, ctx)
	defer resp.Body.Close()
	lines := bufio.NewReader(resp.Body)
	event := func(ev string) string {
		t.Helper()
		f.cloud.nodeEvents <- ev
		line, err := lines.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return line
	}
	patched := func(status string) {
		t.Helper()
		select {
		case p := <-patches:
			if !strings.Contains(p, `"type":"Autonomy"`) || !strings.Contains(p, `"status":"`+status+`"`) {
				t.Fatalf("the cloud got %s, want the condition %s", p, status)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the condition %s was never written to the cloud", status)
		}
	}
	steps := []struct {
		node, want, write string // the cloud's node, what kubelet must see, the write ("" none)
	}{
		{nodeAnnotated(6, true, ""), `{"type":"Autonomy","status":"True"`, "True"},
		{nodeAnnotated(7, true, "True"), "", ""}, // the write's echo: as it is
		{nodeAnnotated(8, false, "True"), `{"type":"Autonomy","status":"False"`, "False"},
		{nodeAnnotated(9, false, "False"), "", ""},
		{nodeAnnotated(10, true, "False"), `{"type":"Autonomy","status":"True"`, "True"},
	}
	for i, s := range steps {
		ev := `{"type":"MODIFIED","object":` + s.node + `}`
		got := event(ev)
		switch {
		case s.want == "" && got != ev+"\n":
			t.Fatalf("step %d: kubelet got %s, want the cloud's event as it is", i, got)
		case s.want != "" && !strings.Contains(got, s.want):
			t.Fatalf("step %d: kubelet got %s, want %s", i, got, s.want)
		}
		if s.write != "" {
			patched(s.write)
		}
	}
	for _, r := range f.cloud.took() {
		if r.method == http.MethodGet && r.uri == "/api/v1/nodes/node-a" {
			t.Fatal("the condition needed a GET of the node")
		}
	}
	select {
	case p := <-patches:
		t.Fatalf("a write the condition did not need: %s", p)
	default:
	}
}
