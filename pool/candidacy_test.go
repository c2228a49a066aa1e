package pool

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"nodehub/internal/certtest"
	"nodehub/listwatch"
)

type caCreds struct{ pool *x509.CertPool }

func (c caCreds) CAPool() *x509.CertPool { return c.pool }
func (c caCreds) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return nil, errors.New("none")
}

// testCA returns a CA and a function that issues a serving certificate of node for ips.
func testCA(t *testing.T) (*x509.CertPool, func(node string, ips ...net.IP) *tls.Certificate) {
	t.Helper()
	ca := certtest.NewCA(t, "ca")
	return ca.Pool(), func(node string, ips ...net.IP) *tls.Certificate {
		return ca.Issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
			IPAddresses: ips, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature})
	}
}

// A hub can serve the pool only with a serving certificate of its node, from the cluster CA,
// naming its pool address, and with its pool port up; each lack has its own reason.
func TestCanServeThePool(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ca, issue := testCA(t)
	otherCA, issueOther := testCA(t)
	_ = otherCA
	var cert *tls.Certificate
	p, err := New(Config{Mode: ModeLease, NodeName: "edge-1", PoolName: "p", Addr: addr, LeaderTimeout: 5 * time.Second,
		Credentials: caCreds{ca}, Cloud: func(*http.Request) (*http.Response, error) { return nil, fmt.Errorf("offline") },
		ServingCert: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			if cert == nil {
				return nil, errors.New("no serving certificate yet")
			}
			return cert, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	lo := net.IPv4(127, 0, 0, 1)
	for _, c := range []struct {
		cert *tls.Certificate
		want string
	}{
		{nil, ReasonNoServingCert},
		{issue("edge-1", net.IPv4(10, 0, 0, 1)), ReasonCertNotForAddress},
		{issue("edge-2", lo), ReasonCertInvalid},
		{issueOther("edge-1", lo), ReasonCertInvalid},
		{issue("edge-1", lo), ""},
	} {
		cert = c.cert
		if reason, why := p.canServe(context.Background()); reason != c.want {
			t.Fatalf("reason %q (%s), want %q", reason, why, c.want)
		}
	}
	ln.Close()
	if reason, why := p.canServe(context.Background()); reason != ReasonPortDown || !strings.Contains(why, addr) {
		t.Fatalf("pool port closed: %q (%s), want %q", reason, why, ReasonPortDown)
	}
}

// Issue 29 (4): a hub that cannot serve the pool does not stand, and no hub elects a member whose
// lease says it cannot: three hubs without serving certificates once each elected itself. With
// nobody able to lead, nobody leads, the pool says why, and the election looks again
// rarely (a minute, then every recheckFollowing), not every few seconds.
func TestElectionOnlyAmongHubsThatCanServe(t *testing.T) {
	p, err := New(Config{Mode: ModeLease, NodeName: "edge-1", PoolName: "p", Addr: "10.0.0.1:10269", SelfDeclared: true,
		Cloud: func(*http.Request) (*http.Response, error) { return nil, fmt.Errorf("offline") }})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	f := &fakeLeases{at: now}
	f.set("edge-1", "10.0.0.1:10269", now, false)
	f.set("edge-2", "10.0.0.2:10269", now, false)
	delete(f.leases[1].Labels, LabelPool) // it cannot serve the pool: no candidate
	cannot := func(context.Context) (string, string) { return ReasonNoServingCert, "no serving certificate" }
	e := &elector{p: p, passed: map[string]string{}, list: f.list, canServe: cannot, settleFor: new(time.Duration)}
	ctx := context.Background()
	var waits []time.Duration
	for range 12 {
		waits = append(waits, e.round(ctx, now))
		if p.Leading() || p.currentLeader() != "" {
			t.Fatalf("leader %q (self %v), want none: no hub can serve the pool", p.currentLeader(), p.Leading())
		}
	}
	for i := range waits {
		if want := unableWait(i + 1); waits[i] != want || waits[i] < retryLeader {
			t.Fatalf("rounds without a leader wait %v, want a minute, then %v (a hub that cannot lead looks as rarely as a follower)", waits, recheckFollowing)
		}
	}
	f.err = errors.New("cloud unreachable")
	if wait := e.round(ctx, now); wait < retryLeader {
		t.Fatalf("the cloud unreachable, a hub that cannot lead looks again in %v, want ≥ %v (at the return the pool's hubs do not all list at once)", wait, retryLeader)
	}
	f.err = nil
	if reason, why := p.Degraded(); reason != ReasonNoServingCert || !strings.Contains(why, "no serving certificate") {
		t.Fatalf("degraded %q (%s), want %q", reason, why, ReasonNoServingCert)
	}
	for _, sel := range f.lists {
		if sel != LabelLeader+"=p" {
			t.Fatalf("a hub that cannot lead listed %q: it waits for a leader's mark (the pool's leases grow with it)", sel)
		}
	}
	// edge-2 can serve: it stands; edge-1 still cannot. edge-1 follows edge-2 once it leads.
	f.set("edge-2", "10.0.0.2:10269", now, false)
	if e.round(ctx, now); p.currentLeader() != "" {
		t.Fatalf("leader %q, want none until edge-2 marks itself", p.currentLeader())
	}
	f.set("edge-2", "10.0.0.2:10269", now, true)
	if e.round(ctx, now); p.currentLeader() != "edge-2@10.0.0.2:10269" || p.Leading() {
		t.Fatalf("leader %q (self %v), want edge-2", p.currentLeader(), p.Leading())
	}
	if reason, _ := p.Degraded(); reason != "" {
		t.Fatalf("following a leader, degraded %q", reason)
	}
	// edge-1 turns able: it leads (smallest), at once.
	e.canServe = servable
	f.set("edge-2", "10.0.0.2:10269", now, true)
	if e.round(ctx, now); p.currentLeader() != "edge-2@10.0.0.2:10269" {
		t.Fatalf("leader %q, want the marked edge-2 kept", p.currentLeader())
	}
	f.set("edge-2", "10.0.0.2:10269", now, false)
	if e.round(ctx, now); !p.Leading() {
		t.Fatalf("leader %q, want edge-1 itself", p.currentLeader())
	}
	// Leading, it can no longer serve (its certificate expired): it steps down at once.
	e.canServe = cannot
	if e.round(ctx, now); p.Leading() {
		t.Fatal("a leader that cannot serve the pool kept leading")
	}
}

// A follower that cannot reach its leader reads the cloud (as at node level) for a back-off that
// doubles with each failure of that leader, up to maxRetryLeader, also when the election names
// the same leader again meanwhile.
func TestFollowerBacksOffAnUnreachableLeader(t *testing.T) {
	p, err := New(Config{Mode: ModeLease, NodeName: "edge-3", PoolName: "p", Addr: "10.0.0.3:10269",
		Cloud: func(*http.Request) (*http.Response, error) { return nil, fmt.Errorf("offline") }})
	if err != nil {
		t.Fatal(err)
	}
	const leader = "edge-1@10.0.0.1:10269"
	p.setLeader(leader, false)
	var got []time.Duration
	for range 8 {
		p.leaderFailed(leader, errors.New("tls: handshake failure"))
		if up, _ := p.pick(); up.Name != "cloud" {
			t.Fatalf("after a failure the stores read %q, want the cloud", up.Name)
		}
		p.setLeader("", false)
		p.setLeader(leader, false) // the election names it again
		if up, _ := p.pick(); up.Name != "cloud" {
			t.Fatalf("named again, the failed leader was tried at once (%q), before its back-off", up.Name)
		}
		if reason, _ := p.Degraded(); reason != ReasonLeaderUnreachable {
			t.Fatalf("degraded %q, want %q", reason, ReasonLeaderUnreachable)
		}
		p.mu.Lock()
		got = append(got, p.retry)
		p.failedAt = p.failedAt.Add(-p.retry) // its back-off is over
		p.mu.Unlock()
	}
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 10 * time.Minute, 10 * time.Minute, 10 * time.Minute}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("back-offs %v, want %v", got, want)
	}
	if up, _ := p.pick(); up.Name == "cloud" {
		t.Fatal("after its back-off the leader is not tried again")
	}
}

// A hub that turns able to serve the pool takes the lead from the leases only once its lease has
// stood for the pool (LeaseMarks) for a heartbeat and a leader timeout at the
// apiserver's time: hubs whose certificates were signed together saw each other's candidacy by
// then, or the first one's leader mark — they once all led at once.
func TestCandidacySettlesBeforeLeading(t *testing.T) {
	p, err := New(Config{Mode: ModeLease, NodeName: "edge-1", PoolName: "p", Addr: "10.0.0.1:10269", SelfDeclared: true,
		Cloud: func(*http.Request) (*http.Response, error) { return nil, fmt.Errorf("offline") }})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	f := &fakeLeases{at: now}
	f.set("edge-1", "10.0.0.1:10269", now, false)
	delete(f.leases[0].Labels, LabelPool) // its last heartbeat's word: no candidate
	e := &elector{p: p, passed: map[string]string{}, list: f.list, canServe: servable}
	ctx := context.Background()
	if e.round(ctx, now); p.Leading() {
		t.Fatal("led before its lease stood for the pool: the others cannot know it stands")
	}
	f.set("edge-1", "10.0.0.1:10269", now, false) // the next heartbeat clears the mark
	wait := e.round(ctx, now)
	if p.Leading() {
		t.Fatal("led as soon as its lease stood for the pool")
	}
	if settle := p.cfg.Heartbeat + p.cfg.LeaderTimeout; wait <= 0 || wait > settle {
		t.Fatalf("looks again in %v, want within %v", wait, settle)
	}
	f.at = now.Add(p.cfg.Heartbeat + p.cfg.LeaderTimeout)
	f.set("edge-1", "10.0.0.1:10269", f.at, false)
	if e.round(ctx, now); !p.Leading() {
		t.Fatalf("leader %q, want edge-1 itself once its candidacy settled", p.currentLeader())
	}
}

// A member able to serve the pool for long takes over at once when it finds no leader (its
// leader died): its candidacy settled long ago, although this is the first time it looks at the
// pool's leases.
func TestLongStandingMemberTakesOverAtOnce(t *testing.T) {
	p, err := New(Config{Mode: ModeLease, NodeName: "edge-2", PoolName: "p", Addr: "10.0.0.2:10269", SelfDeclared: true,
		Cloud: func(*http.Request) (*http.Response, error) { return nil, fmt.Errorf("offline") }})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	f := &fakeLeases{at: now}
	f.set("edge-2", "10.0.0.2:10269", now, false)
	e := &elector{p: p, passed: map[string]string{}, list: f.list, canServe: servable}
	p.setCandidacy("", "")
	p.ableSince = now.Add(-time.Hour)
	if e.round(context.Background(), now); !p.Leading() {
		t.Fatalf("leader %q, want edge-2 itself at once", p.currentLeader())
	}
}

// A follower whose elected member answers that it does not lead (yet: its candidacy settles)
// reads the cloud meanwhile but does not pass it over: passing it over elected a second leader
// beside it when hubs' certificates were signed together.
func TestFollowerDoesNotPassOverAMemberNotLeadingYet(t *testing.T) {
	p, err := New(Config{Mode: ModeLease, NodeName: "edge-2", PoolName: "p", Addr: "10.0.0.2:10269",
		Cloud: func(*http.Request) (*http.Response, error) { return nil, fmt.Errorf("offline") }})
	if err != nil {
		t.Fatal(err)
	}
	p.setLeader("edge-1@10.0.0.1:10269", false)
	p.since = time.Now().Add(-time.Hour)
	p.leaderFailed(p.leader, &listwatch.StatusError{Code: http.StatusServiceUnavailable})
	if up, _ := p.pick(); up.Name != "cloud" {
		t.Fatalf("the stores read %q, want the cloud meanwhile", up.Name)
	}
	if s := p.takeSuspect(); s != "" {
		t.Fatalf("the member not leading yet was passed over (%q)", s)
	}
}

// Issue 29 (5): a leader whose pool port misses a dial on a loaded node keeps leading; only
// portChecks failed checks in a row take its candidacy away (one timeout made a leader of 99
// followers step down again and again at 100 hubs, every follower reading the cloud anew).
func TestPoolPortMissedOnceKeepsTheCandidacy(t *testing.T) {
	p, err := New(Config{Mode: ModeLease, NodeName: "edge-1", PoolName: "p", Addr: "10.0.0.1:10269", SelfDeclared: true,
		Cloud: func(*http.Request) (*http.Response, error) { return nil, fmt.Errorf("offline") }})
	if err != nil {
		t.Fatal(err)
	}
	down := false
	check := func(context.Context) (string, string) {
		if down {
			return ReasonPortDown, "pool port down: i/o timeout"
		}
		return "", ""
	}
	e := &elector{p: p, passed: map[string]string{}, canServe: check}
	ctx := context.Background()
	e.candidacy(ctx)
	down = true
	for i := 1; i < portChecks; i++ {
		if e.candidacy(ctx); !p.eligible() {
			t.Fatalf("after %d missed dial(s) of the pool port the hub no longer stands, want it to until %d", i, portChecks)
		}
	}
	down = false
	e.candidacy(ctx)
	down = true
	for i := 1; i < portChecks; i++ {
		if e.candidacy(ctx); !p.eligible() {
			t.Fatalf("a check that passed did not start the count again")
		}
	}
	if e.candidacy(ctx); p.eligible() {
		t.Fatalf("after %d missed dials of the pool port the hub still stands", portChecks)
	}
}
