package pool

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A leader that stops releases its lease by the stop deadline it is given (the hub's one
// StopTimeout), not by a deadline of its own.
func TestLeaderReleasesByTheStopDeadline(t *testing.T) {
	var got time.Time
	var patched bool
	p, err := New(Config{Mode: ModeLease, NodeName: "edge-1", PoolName: "p", Addr: "10.0.0.1:10269",
		Cloud: func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPatch {
				patched = true
				got, _ = r.Context().Deadline()
			}
			return httptest.NewRecorder().Result(), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	p.leading = true
	want := time.Now().Add(time.Hour)
	stop, cancel := context.WithDeadline(context.Background(), want)
	defer cancel()
	e := &elector{p: p, passed: map[string]string{}}
	e.release(stop)
	if !patched {
		t.Fatal("the leader did not release its lease")
	}
	if !got.Equal(want) {
		t.Fatalf("the release's deadline is %v, want the stop deadline %v", got, want)
	}
}
