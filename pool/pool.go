package pool

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"nodehub/listwatch"
	"nodehub/wire"
)

// Modes (--pool-mode).
const (
	// ModeOff shares on the node only: one upstream list+watch per resource for all local clients.
	ModeOff = "off"
	// ModeLease elects a leader per pool from the pool's node Leases in the cloud (see elect).
	ModeLease = "lease"
	// ModeNodePool follows the leaders OpenYurt's yurt-manager publishes in the NodePool's status.
	ModeNodePool = "nodepool"
)

// Config is what a Pool needs. Zero values of the optional fields work.
type Config struct {
	Resources []Resource
	// Mode is ModeOff, ModeLease or ModeNodePool.
	Mode               string
	NodeName, PoolName string
	// LeaseNamespace holds the node Leases the election reads in lease mode (kube-node-lease).
	LeaseNamespace string
	// Addr is host:port of the pool port: where this hub serves followers when it leads, and the
	// address it advertises as leader.
	Addr string
	// Heartbeat is how often the hub renews its node's Lease (lease mode): a mark it sets is on
	// the cloud within that. Default 10 s.
	Heartbeat time.Duration
	// LeaderTimeout is how long a follower waits on a silent leader or a failed dial before it
	// reads from the cloud itself. Default 5 s.
	LeaderTimeout time.Duration
	// Cloud sends a request (path-only URL) to a healthy cloud server with the node's identity.
	Cloud func(*http.Request) (*http.Response, error)
	// Credentials are the node's; ServingCert is the certificate the leader serves the pool port
	// with (the hub's serving certificate, hub.ServingCertificate).
	Credentials wire.Credentials
	ServingCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	Log         *slog.Logger
	// OnBytes, if set, counts response bytes received per source ("cloud" or "leader").
	OnBytes func(source string, res Resource, n int)
	// OnRole, if set, is told the hub's role ("leader", "follower", "none") and the leader's
	// holder identity whenever they change.
	OnRole func(role, leader string)
	// OnPeerWatch, if set, is told +1 when a follower's watch starts on the pool port and -1 when
	// it ends.
	OnPeerWatch func(delta int)
	// SelfDeclared, in lease mode, lets the nodes that label their own Lease with the pool (and
	// the NodePool's status.nodes, when there is one) be elected when no NodePool names the pool's
	// members (--pool-self-declared-membership). Off, the election elects nobody until the pool's
	// NodePool has been read, and only among its members (AnnotationMembers): any node can label
	// its own Lease, and its own Node into status.nodes.
	SelfDeclared bool
	// Online, if set, says whether the cloud is reachable: a leader that cannot reach it stops
	// serving its followers (they go to the cloud themselves, or to their caches).
	Online func() bool
	// Returned, if set, returns a channel closed when the cloud has come back (the hub spreads
	// that moment over a short random window): every store and the election stop waiting out
	// their back-off and resume at once.
	Returned func() <-chan struct{}
	// OnlineSince, if set, is when the cloud last turned reachable (zero: never, or unknown).
	OnlineSince func() time.Time
	// Tee, if set, sees every list and watch response the stores receive (the hub keeps a copy in
	// its cache); it may replace resp.Body with one that passes the bytes through.
	Tee func(req *http.Request, resp *http.Response)
	// OnNotes, if set (and Mode is not off), is told the pool's notes (notes.go), by node,
	// whenever they change.
	OnNotes func(map[string][]byte)
	// OnCandidacy, if set (lease mode), is told why this hub cannot serve the pool (a Reason), or
	// "" when it can, whenever that changes: the hub puts LeaseMarks on its lease only while it
	// can (a lease without them is no candidate).
	OnCandidacy func(reason string)
	// OnDegraded, if set, is told Degraded's reason whenever it changes ("" not degraded).
	OnDegraded func(reason string)
	// Publish, if set (lease mode), renews this hub's lease in the cloud now, with the marks
	// OnRole has just set: called when this hub takes the lead, so its leader mark and pool address
	// are on the cloud at once, not at the next heartbeat (its followers read the cloud until
	// they see them).
	Publish func(ctx context.Context) error
}

// DefaultLeaderTimeout is Config.LeaderTimeout's default (hub.DefaultPoolLeaderTimeout, and so
// --pool-leader-timeout's).
const DefaultLeaderTimeout = 5 * time.Second

// Pool is the shared stores of the pool-scope resources and this hub's place in the pool.
type Pool struct {
	cfg    Config
	stores map[Resource]*Store
	log    *slog.Logger
	peer   *peerClient

	mu       sync.Mutex
	leading  bool          // this hub holds the pool's lease
	leader   string        // the holder identity of the pool's leader ("" none known)
	failedAt time.Time     // when the current leader last failed this follower
	retry    time.Duration // how long after failedAt the stores read the cloud (doubling per failure)
	fails    int           // consecutive failures of failHolder
	failHold string        // the leader fails counts
	failWhy  string        // its last failure
	since    time.Time     // when the current leader was learnt
	suspect  string        // a leader that failed this hub, for the election to pass over
	returned time.Time     // when the cloud last came back (Config.Returned)
	kick     chan struct{}
	changed  chan struct{}
	decided  chan struct{} // closed once the pool's leader is first known (or given up on)
	once     sync.Once
	notes    *noteBoard

	cannot, cannotWhy string    // why this hub cannot serve the pool ("" it can; candidacy.go)
	candidacyTold     bool      // cannot was decided once
	ableSince         time.Time // when this hub last turned able to serve the pool
	noLeaderWhy       string    // why the election found no leader
	ended             bool      // Run has returned: no more retry timers, no more OnDegraded

	degradedMu   sync.Mutex // held across computing, comparing and telling Degraded's reason
	lastDegraded string     // Degraded's reason as OnDegraded was last told (degradedMu)
	degradedTold bool       // (degradedMu)

	retryTimer timer                             // the leader's back-off's end (retrytimer.go; mu)
	timers     sync.WaitGroup                    // retryTimer's callback, which Run waits for
	afterFunc  func(time.Duration, func()) timer // retryTimer's clock (nil: time.AfterFunc)
}

// New prepares the stores; nothing runs until Run.
func New(cfg Config) (*Pool, error) {
	if cfg.Cloud == nil {
		return nil, errors.New("pool: no cloud")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.LeaderTimeout <= 0 {
		cfg.LeaderTimeout = DefaultLeaderTimeout
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 10 * time.Second
	}
	if cfg.Mode == "" {
		cfg.Mode = ModeOff
	}
	if cfg.Mode != ModeOff && (cfg.Addr == "" || cfg.PoolName == "") {
		return nil, errors.New("pool: a pool mode needs the pool's name and this hub's pool address")
	}
	p := &Pool{cfg: cfg, stores: map[Resource]*Store{}, log: cfg.Log, changed: make(chan struct{}), decided: make(chan struct{}), kick: make(chan struct{}, 1), notes: newNoteBoard()}
	for _, r := range cfg.Resources {
		p.stores[r] = NewStore(r)
	}
	if cfg.Mode != ModeOff {
		p.peer = newPeerClient(cfg.Credentials, cfg.LeaderTimeout, cfg.Addr)
	}
	return p, nil
}

// Run keeps the stores in sync and, in a pool mode, takes part in the pool (election, following
// the leader) until ctx ends, and returns once a leader has given up its leadership, by the stop
// deadline: the context stop returns once ctx has ended (the hub's one stop deadline,
// hub.StopTimeout). The pool port (the followers' reads of a leader) is served by the caller:
// PeerAddr, PeerTLS, ServeHTTP.
func (p *Pool) Run(ctx context.Context, stop func() context.Context) {
	var wg sync.WaitGroup
	if p.cfg.Mode == ModeOff {
		p.decide()
	} else {
		// A follower's first list comes from its leader, not the cloud: wait (a little) for the
		// election to say who leads.
		t := time.AfterFunc(2*p.cfg.LeaderTimeout, p.decide)
		defer t.Stop()
	}
	for _, st := range p.stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-p.decided:
			case <-ctx.Done():
				return
			}
			st.run(ctx, p.pick, p.cfg.Returned, p.log)
		}()
	}
	if p.cfg.Returned != nil && p.cfg.Mode != ModeOff {
		wg.Add(1)
		go func() { defer wg.Done(); p.noteReturns(ctx) }()
	}
	p.role()
	if p.cfg.Mode != ModeOff {
		wg.Add(1)
		go func() { defer wg.Done(); p.runNotes(ctx) }()
	}
	switch p.cfg.Mode {
	case ModeLease:
		wg.Add(1)
		go func() { defer wg.Done(); p.elect(ctx, stop) }()
	case ModeNodePool:
		wg.Add(1)
		go func() { defer wg.Done(); p.followNodePool(ctx) }()
	}
	wg.Wait()
	p.endTimers()
}

// Store returns the store that serves a request — a list or watch of a pool-scope resource in
// plain JSON or protobuf, once the store holds a list — or nil.
func (p *Pool) Store(ri *wire.RequestInfo) *Store {
	if p == nil || !ri.IsResource || ri.Subresource != "" || ri.Accept.As != "" || ri.Name != "" {
		return nil
	}
	if ri.Verb != wire.VerbList && ri.Verb != wire.VerbWatch || ri.ResourceVersionMatch == "Exact" || ri.Continue != "" || ri.ShardSelector != "" {
		return nil // a list at an exact past resourceVersion, the next page of a list the cloud began, or one shard of it, only the cloud can answer
	}
	st := p.stores[Of(ri)]
	if st == nil || !st.Synced() {
		return nil
	}
	return st
}

// Pending returns the store of the resource a list or watch addresses while it has not synced
// yet (nil when there is none, or it has): a reader that can wait for it reads nothing twice.
func (p *Pool) Pending(ri *wire.RequestInfo) *Store {
	if p == nil || !ri.IsResource || ri.Subresource != "" || ri.Name != "" || ri.ShardSelector != "" || ri.Verb != wire.VerbList && ri.Verb != wire.VerbWatch {
		return nil
	}
	st := p.stores[Of(ri)]
	if st == nil || st.Synced() {
		return nil
	}
	return st
}

// Stores returns the stores, for metrics.
func (p *Pool) Stores() map[Resource]*Store { return p.stores }

// pick chooses a store's upstream: the leader while there is one that is not this hub and has
// not just failed, else the cloud.
func (p *Pool) pick() (Upstream, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	addr := leaderAddr(p.leader)
	if p.cfg.Mode == ModeOff || p.leading || addr == "" || addr == p.cfg.Addr || time.Since(p.failedAt) < p.retry {
		return Upstream{Name: "cloud", Fetch: p.fetchCloud}, p.changed
	}
	leader := p.leader
	return Upstream{
		Name: addr,
		Fetch: func(ctx context.Context, path string) (*http.Response, error) {
			return p.fetchLeader(ctx, leader, path)
		},
		Silence: p.cfg.LeaderTimeout,
		Failed:  func(err error) { p.leaderFailed(leader, err) },
	}, p.changed
}

func (p *Pool) decide() { p.once.Do(func() { close(p.decided) }) }

// noteReturns records when the cloud comes back, until ctx ends.
func (p *Pool) noteReturns(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.cfg.Returned():
			p.mu.Lock()
			p.returned = time.Now()
			p.mu.Unlock()
		}
	}
}

// leaderFailed sends every store to the cloud for retryLeader, doubling with each further failure
// of the same leader (up to maxRetryLeader: a leader its followers cannot reach costs no more than
// node-level sharing), unless the leader changed since.
// A leader elected just now that answers with an error (it may still be listing from the cloud)
// is given LeaderTimeout, and one that answers just after this hub's link came back (it may not
// have seen the cloud return yet: a region-wide cut ends for everyone within a few heartbeats)
// three; one that cannot be reached is given up at once. While this hub cannot reach the cloud
// itself, the leader is never given up for the cloud: it is the better bet (a region-wide cut
// ends for the leader too, and its followers keep reading from it through the return).
func (p *Pool) leaderFailed(leader string, err error) {
	defer p.notifyDegraded()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.online() {
		return
	}
	var answered *listwatch.StatusError
	if p.leader != leader || time.Since(p.failedAt) < p.retry || errors.As(err, &answered) &&
		(time.Since(p.since) < p.cfg.LeaderTimeout || time.Since(p.backSince()) < 3*p.cfg.LeaderTimeout) {
		return
	}
	if p.failHold != leader || time.Since(p.failedAt) > p.retry+maxRetryLeader {
		p.failHold, p.fails = leader, 0 // another leader, or this one served long since
	}
	p.retry = doubled(retryLeader, p.fails, maxRetryLeader)
	p.fails++
	p.failedAt, p.failWhy = time.Now(), err.Error()
	p.signalLocked()
	p.retryAfterLocked(p.retry)
	if cutOff(err) {
		// Alive and still leading, only cut off from the cloud (its own link, or the whole
		// region's, noticed here a moment before this hub's own health check notices): read the
		// cloud meanwhile, but do not pass it over — at the region's return it leads on.
		p.log.Warn("pool: leader cannot reach the cloud; reading from the cloud meanwhile", "leader", leader)
		return
	}
	if notLeading(err) {
		// Alive, and not leading (yet): a member whose candidacy has not settled, or one that
		// follows another. Passing it over would elect a second leader beside it; the election
		// looks again (a leader marked meanwhile wins).
		p.log.Info("pool: the elected member does not lead (yet); reading from the cloud meanwhile", "leader", leader, "for", p.retry)
	} else {
		p.log.Warn("pool: leader unreachable; reading from the cloud", "leader", leader, "err", err, "for", p.retry)
		p.suspect = leader
	}
	select {
	case p.kick <- struct{}{}: // the election looks again now
	default:
	}
}

// notLeading reports whether a leader's answer says it does not lead (servePeer's 503 without
// Retry-After).
func notLeading(err error) bool {
	var se *listwatch.StatusError
	return errors.As(err, &se) && se.Code == http.StatusServiceUnavailable && se.RetryAfter == 0
}

// cutOff reports whether a leader's answer says it is alive but cannot reach the cloud (its 503
// with Retry-After, servePeer).
func cutOff(err error) bool {
	var se *listwatch.StatusError
	return errors.As(err, &se) && se.Code == http.StatusServiceUnavailable && se.RetryAfter > 0
}

// keepExpired reports whether the current leader, whose lease this hub sees expired (renewals
// not seen for its duration), stays leader. An expired lease is no proof of death when the
// renewals could not be seen: a follower keeps a leader until it fails this hub (leaderFailed:
// unreachable, silent, or no longer leading — asked over the pool port, not the cloud); a
// leader keeps itself while it cannot reach the cloud and for one lease duration after the
// cloud came back (its own renewal resumes with its heartbeat), then steps down if its lease is
// still not renewed (a dead kubelet: the hub stops renewing).
func (p *Pool) keepExpired(self bool, dur time.Duration) bool {
	if !self {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.online() || time.Since(p.backSince()) < dur
}

// backSince is when this hub last found the cloud reachable again (lock held): the moment its
// health turned healthy (Config.OnlineSince), or the spread wake-up after it.
func (p *Pool) backSince() time.Time {
	t := p.returned
	if p.cfg.OnlineSince != nil {
		if s := p.cfg.OnlineSince(); s.After(t) {
			t = s
		}
	}
	return t
}

// leadingFor is how long this hub has led (an hour and more when it does not lead).
func (p *Pool) leadingFor() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.leading {
		return time.Hour
	}
	return time.Since(p.since)
}

// currentLeader is the pool's leader as this hub last decided (holder identity, "" none).
func (p *Pool) currentLeader() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.leader
}

// takeSuspect returns (and forgets) the leader that last failed this hub.
func (p *Pool) takeSuspect() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.suspect
	p.suspect = ""
	return s
}

// setLeader records the pool's leader as the election (or the NodePool) says.
func (p *Pool) setLeader(holder string, leading bool) {
	p.mu.Lock()
	if p.leader == holder && p.leading == leading {
		p.mu.Unlock()
		return
	}
	p.log.Info("pool: leader changed", "leader", holder, "self", leading)
	p.leader, p.leading, p.since = holder, leading, time.Now()
	if holder != "" && holder != p.failHold {
		p.failedAt = time.Time{} // another leader is tried at once; the one that failed waits its back-off out
	}
	p.signalLocked()
	p.mu.Unlock()
	if holder != "" {
		p.decide()
	}
	p.role()
	p.notifyDegraded()
}

func (p *Pool) signal() {
	p.mu.Lock()
	p.signalLocked()
	p.mu.Unlock()
}

func (p *Pool) signalLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Pool) online() bool { return p.cfg.Online == nil || p.cfg.Online() }

// Leading reports whether this hub is the pool's leader.
func (p *Pool) Leading() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.leading
}

func (p *Pool) role() {
	if p.cfg.OnRole == nil {
		return
	}
	p.mu.Lock()
	role, leader := "none", p.leader
	switch {
	case p.cfg.Mode == ModeOff:
	case p.leading:
		role = "leader"
	case leader != "":
		role = "follower"
	}
	p.mu.Unlock()
	p.cfg.OnRole(role, leader)
}

// leaderAddr is the pool address in a holder identity ("edge-1@10.0.0.5:10269").
func leaderAddr(holder string) string {
	_, addr, _ := strings.Cut(holder, "@")
	return addr
}

// fetchCloud reads a pool-scope resource from the cloud, counted and teed into the cache.
func (p *Pool) fetchCloud(ctx context.Context, path string) (*http.Response, error) {
	resp, err := p.fetchElection(ctx, path)
	if err != nil {
		return nil, err
	}
	p.count("cloud", resp.Request, resp)
	if p.cfg.Tee != nil {
		p.cfg.Tee(resp.Request, resp)
	}
	return resp, nil
}

// fetchLeader reads from the leader named by holder (node@address): the answer must come from
// that node's own serving certificate, so a hub at the address cannot pass for another node.
func (p *Pool) fetchLeader(ctx context.Context, holder, path string) (*http.Response, error) {
	node, addr, _ := strings.Cut(holder, "@")
	resp, err := p.peer.get(ctx, node, addr, path)
	if err != nil {
		return nil, err
	}
	p.count("leader", resp.Request, resp)
	if p.cfg.Tee != nil && resp.StatusCode == http.StatusOK {
		p.cfg.Tee(resp.Request, resp)
	}
	return resp, nil
}

// count wraps a response body so its bytes are counted per source and resource.
func (p *Pool) count(source string, req *http.Request, resp *http.Response) {
	if p.cfg.OnBytes == nil {
		return
	}
	ri, err := wire.ParseURL(http.MethodGet, req.URL)
	if err != nil {
		return
	}
	res := Of(ri)
	resp.Body = &wire.CountingBody{ReadCloser: resp.Body, Count: func(n int) { p.cfg.OnBytes(source, res, n) }}
}
