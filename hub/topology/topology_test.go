package topology

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"nodehub/wire"
)

// fakeCloud answers the topology's lists from its maps and streams the events sent on its
// channel to the watches.
type fakeCloud struct {
	mu     sync.Mutex
	lists  map[string]string // path prefix → list body
	events chan string       // watch lines, to the services' watch (the others stay quiet)
}

func (c *fakeCloud) fetch(ctx context.Context, path string) (*http.Response, error) {
	hdr := http.Header{"Content-Type": {"application/json"}}
	if strings.Contains(path, "watch=true") {
		pr, pw := io.Pipe()
		go func() {
			for {
				select {
				case <-ctx.Done():
					pw.CloseWithError(ctx.Err())
					return
				case line := <-c.serviceEvents(path):
					if _, err := io.WriteString(pw, line+"\n"); err != nil {
						return
					}
				}
			}
		}()
		return &http.Response{StatusCode: 200, Status: "200 OK", Header: hdr, Body: pr}, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for prefix, body := range c.lists {
		if strings.HasPrefix(path, prefix) {
			return &http.Response{StatusCode: 200, Status: "200 OK", Header: hdr, Body: io.NopCloser(strings.NewReader(body))}, nil
		}
	}
	return &http.Response{StatusCode: 404, Status: "404 Not Found", Header: hdr, Body: io.NopCloser(strings.NewReader(`{"kind":"Status","code":404}`))}, nil
}

func (c *fakeCloud) serviceEvents(path string) chan string {
	if strings.HasPrefix(path, "/api/v1/services") {
		return c.events
	}
	return nil // never ready
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

func TestSourceFollowsServicesAndTheNodePool(t *testing.T) {
	cloud := &fakeCloud{events: make(chan string), lists: map[string]string{
		"/api/v1/services": `{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[
			{"metadata":{"namespace":"default","name":"web","annotations":{"openyurt.io/topologyKeys":"openyurt.io/nodepool"}}},
			{"metadata":{"namespace":"default","name":"plain"}}]}`,
		"/apis/apps.openyurt.io/v1beta2/nodepools": `{"kind":"NodePoolList","apiVersion":"apps.openyurt.io/v1beta2","metadata":{"resourceVersion":"6"},"items":[
			{"metadata":{"name":"pool-a"},"status":{"nodes":["edge-1","edge-2"]}}]}`,
		"/api/v1/nodes": `{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"edge-1"}}]}`,
	}}
	src := New("pool-a", cloud.fetch, nil)
	changed := src.Changes()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go src.Run(ctx)

	eventually(t, "the annotated service is known", func() bool { return src.TopologyKey("default", "web") == "openyurt.io/nodepool" })
	if src.TopologyKey("default", "plain") != "" || !src.Any() {
		t.Fatalf("keys: plain %q, any %v", src.TopologyKey("default", "plain"), src.Any())
	}
	eventually(t, "the NodePool's members win over node labels", func() bool {
		m, ok := src.NodePoolMembers()
		return ok && len(m) == 2 && m["edge-1"] && m["edge-2"]
	})
	if pn := src.PoolNodes(); len(pn) != 2 {
		t.Fatalf("pool nodes %v", pn)
	}
	select {
	case <-changed.Done():
	default:
		t.Fatal("a change did not end the period")
	}

	// A watched annotation change and a deletion.
	cloud.events <- `{"type":"MODIFIED","object":{"metadata":{"namespace":"default","name":"plain","annotations":{"openyurt.io/topologyKeys":"kubernetes.io/hostname"}}}}`
	eventually(t, "a modified service's key", func() bool { return src.TopologyKey("default", "plain") == "kubernetes.io/hostname" })
	cloud.events <- `{"type":"DELETED","object":{"metadata":{"namespace":"default","name":"web"}}}`
	eventually(t, "a deleted service's key is gone", func() bool { return src.TopologyKey("default", "web") == "" })
}

func TestSourceWithoutPoolReadsOnlyServices(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	fetch := func(ctx context.Context, path string) (*http.Response, error) {
		mu.Lock()
		paths = append(paths, path)
		mu.Unlock()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	New("", fetch, nil).Run(ctx)
	<-ctx.Done()
	time.Sleep(10 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for _, p := range paths {
		if !strings.HasPrefix(p, "/api/v1/services") {
			t.Fatalf("a node without a pool read %s", p)
		}
	}
}

// With a shared copy of the services (Services), the source follows it and asks fetch nothing
// for services; once no copy is offered (the store emptied past its bounds), it lists and
// watches through fetch again.
func TestSourceFollowsSharedServices(t *testing.T) {
	cloud := &fakeCloud{events: make(chan string), lists: map[string]string{
		"/api/v1/services": `{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[
			{"metadata":{"namespace":"default","name":"from-cloud","annotations":{"openyurt.io/topologyKeys":"openyurt.io/nodepool"}}}]}`,
	}}
	var mu sync.Mutex
	var asked []string
	fetch := func(ctx context.Context, path string) (*http.Response, error) {
		mu.Lock()
		asked = append(asked, path)
		mu.Unlock()
		return cloud.fetch(ctx, path)
	}
	events := make(chan wire.WatchEvent)
	gone := make(chan struct{})
	offered := 0
	src := New("", fetch, nil)
	src.Services = func(ctx context.Context) Follow {
		select {
		case <-gone:
			return nil
		default:
		}
		offered++
		return func(ctx context.Context, list func([][]byte), event func(wire.WatchEvent)) error {
			list([][]byte{[]byte(`{"metadata":{"namespace":"default","name":"web","annotations":{"openyurt.io/topologyKeys":"kubernetes.io/hostname"}}}`)})
			for {
				select {
				case ev := <-events:
					event(ev)
				case <-gone:
					return errors.New("store emptied")
				case <-ctx.Done():
					return nil
				}
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); src.Run(ctx) }()
	defer func() { cancel(); <-done }()

	select {
	case <-src.Synced():
	case <-time.After(30 * time.Second):
		t.Fatal("not synced from the shared services")
	}
	if src.TopologyKey("default", "web") != "kubernetes.io/hostname" {
		t.Fatalf("key of web: %q", src.TopologyKey("default", "web"))
	}
	events <- wire.WatchEvent{Type: wire.EventAdded, Object: []byte(`{"metadata":{"namespace":"default","name":"db","annotations":{"openyurt.io/topologyKeys":"openyurt.io/nodepool"}}}`)}
	eventually(t, "a followed event", func() bool { return src.TopologyKey("default", "db") == "openyurt.io/nodepool" })
	mu.Lock()
	if len(asked) != 0 {
		t.Fatalf("fetch asked for %v while the shared services were followed", asked)
	}
	mu.Unlock()

	close(gone)
	eventually(t, "the cloud's services once no shared copy is offered", func() bool {
		return src.TopologyKey("default", "from-cloud") == "openyurt.io/nodepool" && src.TopologyKey("default", "web") == ""
	})
	if offered != 1 {
		t.Fatalf("offered %d times", offered)
	}
}
