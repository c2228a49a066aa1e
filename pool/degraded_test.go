package pool

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
)

// Calls of notifyDegraded from several goroutines tell OnDegraded in turn: a slower call never
// overwrites the newer reason another told meanwhile (review finding 4: nodehub_pool_degraded
// could be left showing a stale reason).
func TestDegradedToldInOrder(t *testing.T) {
	var mu sync.Mutex
	gauge := "" // what the metric shows: the reason told last
	entered, second, release := make(chan struct{}), make(chan struct{}, 1), make(chan struct{})
	p, err := New(Config{Mode: ModeLease, NodeName: "edge-3", PoolName: "p", Addr: "10.0.0.3:10269",
		Cloud: func(*http.Request) (*http.Response, error) { return nil, fmt.Errorf("offline") },
		OnDegraded: func(reason string) {
			if reason == ReasonCertInvalid { // the slow call: it waits until the other one told, or 1 s
				close(entered)
				<-release
			} else {
				select {
				case second <- struct{}{}:
				default:
				}
			}
			mu.Lock()
			gauge = reason
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	p.notifyDegraded()
	<-second // the first reason told
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.setCandidacy(ReasonCertInvalid, "not valid") }()
	<-entered
	go func() { defer wg.Done(); p.setCandidacy("", "") }()
	select { // before the fix the other call tells at once; after it, it waits its turn
	case <-second:
	case <-time.After(time.Second):
	}
	close(release)
	wg.Wait()
	want, _ := p.Degraded()
	mu.Lock()
	defer mu.Unlock()
	if gauge != want {
		t.Fatalf("OnDegraded was told %q last, Degraded says %q", gauge, want)
	}
}

// stubTimer is a retry timer that never fires on its own: the test fires it.
type stubTimer struct {
	fired   bool // Stop reports false, as for a timer whose callback already started
	stopped chan struct{}
}

func (f *stubTimer) Stop() bool {
	close(f.stopped)
	return !f.fired
}
func (f *stubTimer) Reset(time.Duration) bool { return false }

// The leader's back-off timer is Run's: stopped when Run returns, and a callback that already
// started is waited for and tells OnDegraded nothing once Run ended (review finding 4: an
// unowned time.AfterFunc called OnDegraded after Run).
func TestRetryTimerEndsWithRun(t *testing.T) {
	for _, fired := range []bool{false, true} {
		told := make(chan string, 10)
		p, err := New(Config{Cloud: func(*http.Request) (*http.Response, error) { return nil, errors.New("offline") },
			OnDegraded: func(reason string) { told <- reason }})
		if err != nil {
			t.Fatal(err)
		}
		ft := &stubTimer{fired: fired, stopped: make(chan struct{})}
		var fire func()
		p.afterFunc = func(_ time.Duration, f func()) timer { fire = f; return ft }
		p.setLeader("edge-1@10.0.0.1:10269", false)
		p.leaderFailed("edge-1@10.0.0.1:10269", errors.New("connection refused"))
		if fire == nil {
			t.Fatal("leaderFailed armed no retry timer")
		}
		for len(told) > 0 {
			<-told
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		ran := make(chan struct{})
		go func() { defer close(ran); p.Run(ctx, func() context.Context { return context.Background() }) }()
		<-ft.stopped
		if fired {
			select {
			case <-ran:
				t.Fatal("Run returned before the retry timer's callback, which had started, ended")
			default:
			}
			p.cfg.Mode = ModeLease // Degraded's reason changes: a callback would tell it
			fire()
		}
		<-ran
		if len(told) > 0 {
			t.Fatalf("OnDegraded told %q after Run returned", <-told)
		}
	}
}
