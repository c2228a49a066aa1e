package listwatch

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"nodehub/wire"
)

func fetchFrom(srv *httptest.Server) Fetch {
	return func(ctx context.Context, path string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		if err != nil {
			return nil, err
		}
		return srv.Client().Do(req)
	}
}

func TestListWatchAndStatusErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Query().Get("watch") == "" && r.URL.Path == "/api/v1/services":
			io.WriteString(w, `{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}`)
		case r.URL.Path == "/api/v1/services":
			io.WriteString(w, `{"type":"ADDED","object":{"metadata":{"name":"c"}}}`+"\n")
			io.WriteString(w, `{"type":"DELETED","object":{"metadata":{"name":"a"}}}`+"\n")
		default:
			w.WriteHeader(http.StatusGone)
			io.WriteString(w, `{"kind":"Status","code":410}`)
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	var items []string
	meta, err := List(ctx, fetchFrom(srv), "/api/v1/services", func(raw []byte) error { items = append(items, string(raw)); return nil })
	if err != nil || meta.ResourceVersion != "7" || len(items) != 2 || !strings.Contains(items[1], `"b"`) {
		t.Fatalf("list: %v %q %q", err, meta.ResourceVersion, items)
	}
	var events []string
	err = Watch(ctx, fetchFrom(srv), "/api/v1/services?watch=1", 0, func(ev wire.WatchEvent) error { events = append(events, ev.Type); return nil })
	if err != nil || strings.Join(events, ",") != "ADDED,DELETED" {
		t.Fatalf("watch: %v %v", err, events)
	}
	_, err = List(ctx, fetchFrom(srv), "/api/v1/gone", func([]byte) error { return nil })
	if !IsGone(err) {
		t.Fatalf("410: %v, want IsGone", err)
	}
	stop := errors.New("stop")
	err = Watch(ctx, fetchFrom(srv), "/api/v1/services?watch=1", 0, func(wire.WatchEvent) error { return stop })
	if !errors.Is(err, stop) {
		t.Fatalf("an event's error ends the watch with it: %v", err)
	}
}

func TestWatchEndsWhenSilent(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	start := time.Now()
	err := Watch(context.Background(), fetchFrom(srv), "/w?watch=1", 100*time.Millisecond, func(wire.WatchEvent) error { return nil })
	if !errors.Is(err, ErrSilent) {
		t.Fatalf("silent watch: %v, want ErrSilent", err)
	}
	if d := time.Since(start); d > 30*time.Second { // a silence of 100 ms: only a stuck watch takes this long
		t.Fatalf("ended after %v", d)
	}
}

func TestRunRetriesWithBackOffAndWakes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int32
	wake := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, time.Hour, time.Hour, func(context.Context) (<-chan struct{}, error) {
			switch calls.Add(1) {
			case 1:
				return nil, nil // success: again at once
			case 2:
				return wake, errors.New("failed") // back-off of an hour, unless woken
			default:
				cancel()
				return nil, nil
			}
		})
	}()
	for calls.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	close(wake)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the wake channel did not end the back-off")
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d steps, want 3", n)
	}
}

// The cloud's return (Wake) ends every loop's back-off at once, and the back-off starts again
// from First: nothing is left over from the outage.
func TestLoopWakesOnReturnWithoutLeftoverBackOff(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int32
	returned := make(chan struct{})
	failed := make(chan struct{}, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Loop{First: time.Hour, Most: time.Hour, Wake: func() <-chan struct{} { return returned }}.Run(ctx, func(context.Context) (<-chan struct{}, error) {
			if calls.Add(1) == 1 {
				failed <- struct{}{}
				return nil, errors.New("offline") // an hour's back-off, unless the cloud comes back
			}
			cancel()
			return nil, nil
		})
	}()
	<-failed
	close(returned)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the cloud's return did not end the back-off")
	}
}

// A 429 with Retry-After is honoured: the loop waits at least that long even when woken.
func TestLoopHonoursRetryAfter(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	_, err := List(context.Background(), fetchFrom(srv), "/api/v1/services", func([]byte) error { return nil })
	if RetryAfter(err) != time.Second {
		t.Fatalf("RetryAfter(%v) = %v, want 1s", err, RetryAfter(err))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	returned := make(chan struct{})
	close(returned) // the wake is already there: it must not cut the server's wait short
	var at []time.Time
	Loop{First: time.Millisecond, Most: time.Millisecond, Wake: func() <-chan struct{} { return returned }}.Run(ctx, func(context.Context) (<-chan struct{}, error) {
		at = append(at, time.Now())
		if len(at) == 2 {
			cancel()
			return nil, nil
		}
		return nil, err
	})
	if len(at) != 2 || at[1].Sub(at[0]) < time.Second {
		t.Fatalf("retried after %v, want ≥ the server's 1s", at[1].Sub(at[0]))
	}
}

// Refusals in a row double the back-off from Refused up to half an hour (a node refused a list
// it may never make costs the link a few requests a day, not one a minute); a longer Refused
// stays as it is.
func TestRefusalsInARowBackOffFurther(t *testing.T) {
	var got []time.Duration
	for w, i := time.Minute, 0; i < 8; i++ {
		got = append(got, w)
		w = nextRefusal(w, time.Minute)
	}
	want := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 30 * time.Minute, 30 * time.Minute, 30 * time.Minute}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("back-offs %v, want %v", got, want)
		}
	}
	if nextRefusal(time.Hour, time.Hour) != time.Hour {
		t.Fatal("a Refused longer than the cap must stay")
	}
	// The loop waits at least that long between refusals (a timer never fires early, so the
	// lower bounds hold on a loaded machine) and a success starts again from Refused.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var at []time.Time
	Loop{First: time.Microsecond, Most: time.Microsecond, Refused: time.Millisecond}.Run(ctx, func(context.Context) (<-chan struct{}, error) {
		at = append(at, time.Now())
		switch len(at) {
		case 6:
			return nil, nil
		case 8:
			cancel()
		}
		return nil, &StatusError{Code: http.StatusForbidden}
	})
	for i, least := range []time.Duration{1, 2, 4, 8, 16, 0, 1} {
		if gap := at[i+1].Sub(at[i]); gap < least*time.Millisecond {
			t.Fatalf("gap %d: %v, want at least %v ms (calls at %v)", i, gap, least, at)
		}
	}
}

// A 403 or 404 (an API the cluster does not serve) is retried after Refused, not Most.
func TestLoopRefusedBackOff(t *testing.T) {
	if !refused(&StatusError{Code: http.StatusNotFound}) || !refused(&StatusError{Code: http.StatusForbidden}) || refused(&StatusError{Code: http.StatusGone}) || refused(errors.New("x")) {
		t.Fatal("refused: 403 and 404 only")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	returned := make(chan struct{})
	calls := make(chan struct{}, 4)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Loop{First: time.Millisecond, Most: time.Millisecond, Refused: time.Hour, Wake: func() <-chan struct{} { return returned }}.Run(ctx, func(context.Context) (<-chan struct{}, error) {
			select {
			case calls <- struct{}{}:
			default:
			}
			return nil, &StatusError{Code: http.StatusNotFound}
		})
	}()
	<-calls
	select {
	case <-calls:
		t.Fatal("a 404 was retried after Most, not Refused")
	case <-time.After(200 * time.Millisecond):
	}
	close(returned) // the cloud's return still wakes it
	<-calls
	cancel()
	<-done
}

// A pool leader's 503 with Retry-After: 300 (cut off from the cloud, or hostile) does not keep the
// loop off another upstream, or off the link's return, for five minutes: a change of upstream
// (the leader changed) or the return ends the wait.
func TestLoopRetryAfterWokenByNewUpstreamOrReturn(t *testing.T) {
	unavailable := &StatusError{Op: "watch", Code: http.StatusServiceUnavailable, Status: "503 Service Unavailable", RetryAfter: 300 * time.Second}
	for _, by := range []string{"upstream", "return"} {
		t.Run(by, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			changed, returned := make(chan struct{}), make(chan struct{})
			failed, done := make(chan struct{}), make(chan struct{})
			calls := 0
			go func() {
				defer close(done)
				Loop{First: time.Millisecond, Most: time.Millisecond, Wake: func() <-chan struct{} { return returned }}.Run(ctx, func(context.Context) (<-chan struct{}, error) {
					if calls++; calls == 1 {
						close(failed)
						return changed, unavailable
					}
					cancel()
					return nil, nil
				})
			}()
			<-failed
			if by == "upstream" {
				close(changed)
			} else {
				close(returned)
			}
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				t.Fatalf("a new %s did not end the leader's 300 s Retry-After", by)
			}
		})
	}
}
