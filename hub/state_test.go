package hub

import (
	"context"
	"testing"
	"time"

	"nodehub/hub/remote"
)

func TestCloudStateStartsUnknown(t *testing.T) {
	s := newCloudState(&remote.Balancer{})
	begun := time.Now()
	s.begin(begun)
	if s.Current() != remote.Unknown || s.Online() {
		t.Fatalf("start: %v", s.Current())
	}
	period := s.OnlinePeriod()
	// A read made before the first verdict waits for it until the cold-start wait ends, not until
	// a verdict comes (never, here). The upper bound is only there to fail rather than hang.
	if st := s.Settle(context.Background()); st != remote.Unknown {
		t.Fatalf("settle: %v", st)
	}
	if d := time.Since(begun); d < coldWait || d > coldWait+10*time.Second {
		t.Fatalf("settle waited %v after the start, want about %v", d, coldWait)
	}
	// Once the cold-start wait is over, it does not wait at all: a settle that waited again would
	// take coldWait every time; a loaded machine may stall one attempt that long, not three.
	var fastest time.Duration = time.Hour
	for range 3 {
		start := time.Now()
		s.Settle(context.Background())
		fastest = min(fastest, time.Since(start))
	}
	if fastest >= coldWait {
		t.Fatalf("settle after the cold-start wait took %v", fastest)
	}
	// A verdict during the wait ends it at once (the wait ends in an hour: nothing else ends it).
	s.begin(time.Now().Add(time.Hour))
	go func() {
		time.Sleep(10 * time.Millisecond)
		s.set(remote.Healthy)
	}()
	if st := s.Settle(context.Background()); st != remote.Healthy {
		t.Fatalf("settle with a verdict: %v", st)
	}
	if period.Err() != nil {
		t.Fatal("the online period ended without going offline")
	}
	ch := s.Changed()
	if !s.set(remote.Unhealthy) || period.Err() == nil {
		t.Fatal("going offline did not end the online period")
	}
	select {
	case <-ch:
	default:
		t.Fatal("change not signalled")
	}
	if s.set(remote.Unhealthy) {
		t.Fatal("no change reported as one")
	}
	s.set(remote.Healthy)
	if s.OnlinePeriod().Err() != nil || !s.Online() {
		t.Fatal("back online without a new period")
	}
}

// Going offline from the cold start (the first probe failed) ends what was forwarded meanwhile.
func TestCloudStateUnknownToOffline(t *testing.T) {
	s := newCloudState(&remote.Balancer{})
	p := s.OnlinePeriod()
	s.set(remote.Unhealthy)
	if p.Err() == nil {
		t.Fatal("requests forwarded before the first verdict not cancelled when it is offline")
	}
}

// The cloud's return wakes the hub's own loops (Returned), within the spread window; the channel
// taken during an outage is the one closed.
func TestCloudStateReturnedWakesAfterTheReturn(t *testing.T) {
	s := newCloudState(&remote.Balancer{})
	s.set(remote.Unhealthy)
	ch := s.Returned()
	select {
	case <-ch:
		t.Fatal("Returned closed while offline")
	default:
	}
	s.set(remote.Healthy)
	select {
	case <-ch:
	case <-time.After(returnSpread + 30*time.Second):
		t.Fatal("Returned not closed after the return")
	}
	if s.Returned() == ch {
		t.Fatal("the next outage's channel is the closed one")
	}
}
