package pool

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"strings"
	"time"
)

// Why a hub cannot serve the pool, or why the pool is degraded for this hub (Degraded's reasons,
// the label value of nodehub_pool_degraded).
const (
	ReasonNoServingCert     = "no-serving-certificate"
	ReasonCertNotForAddress = "serving-certificate-not-for-pool-address"
	ReasonCertInvalid       = "serving-certificate-invalid"
	ReasonPortDown          = "pool-port-down"
	ReasonLeaderUnreachable = "leader-unreachable"
	ReasonNoLeader          = "no-leader"
)

// Back-offs: a follower whose leader failed it reads the cloud (as at node level) for
// retryLeader, doubling with each further failure of the same leader up to maxRetryLeader; an
// election that found no leader looks again after LeaderTimeout/2, doubling up to maxNoLeader
// (this hub turning able to serve the pool looks again at once; a hub that cannot: unable.go).
const (
	retryLeader    = 30 * time.Second
	maxRetryLeader = 10 * time.Minute
	maxNoLeader    = 10 * time.Minute
)

// doubled is base doubled n times, at most limit.
func doubled(base time.Duration, n int, limit time.Duration) time.Duration {
	d := base
	for i := 0; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// canServe says whether this hub can serve the pool ("" when it can), and why not: it has a
// serving certificate (Config.ServingCert) of its own node (CN system:node:<node>), valid now,
// from the cluster CA, for server auth, naming its pool address; and its pool port accepts
// connections. That is what a follower checks when it connects.
func (p *Pool) canServe(ctx context.Context) (reason, why string) {
	if p.cfg.ServingCert == nil {
		return ReasonNoServingCert, "no serving certificate"
	}
	c, err := p.cfg.ServingCert(&tls.ClientHelloInfo{})
	if err != nil || c == nil || len(c.Certificate) == 0 {
		return ReasonNoServingCert, fmt.Sprintf("no serving certificate (its kubernetes.io/kubelet-serving CSR awaits a signer and an approver): %v", err)
	}
	if reason, why := p.checkCert(c); reason != "" {
		return reason, why
	}
	d := net.Dialer{Timeout: p.cfg.LeaderTimeout}
	conn, err := d.DialContext(ctx, "tcp", p.cfg.Addr)
	if err != nil {
		return ReasonPortDown, fmt.Sprintf("pool port %s down: %v", p.cfg.Addr, err)
	}
	conn.Close()
	return "", ""
}

// checkCert checks the serving certificate as a follower will: its node, the cluster CA, now, the
// pool address.
func (p *Pool) checkCert(c *tls.Certificate) (reason, why string) {
	leaf := c.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return ReasonCertInvalid, "serving certificate unreadable: " + err.Error()
		}
	}
	if leaf.Subject.CommonName != "system:node:"+p.cfg.NodeName {
		return ReasonCertInvalid, fmt.Sprintf("serving certificate of %q, not of this node", leaf.Subject.CommonName)
	}
	host, _, err := net.SplitHostPort(p.cfg.Addr)
	if err != nil {
		host = p.cfg.Addr
	}
	if err := leaf.VerifyHostname(strings.Trim(host, "[]")); err != nil {
		return ReasonCertNotForAddress, "serving certificate does not name the pool address: " + err.Error()
	}
	var ca *x509.CertPool
	if p.cfg.Credentials != nil {
		ca = p.cfg.Credentials.CAPool()
	}
	if ca == nil {
		return ReasonCertInvalid, "cluster CA not loaded"
	}
	inter := x509.NewCertPool()
	for _, der := range c.Certificate[1:] {
		if ic, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(ic)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return ReasonCertInvalid, "serving certificate not valid for the pool: " + err.Error()
	}
	return "", ""
}

// Degraded says why this hub does not share through a pool leader in a pool mode ("" when it
// does, or leads, or the pool mode is off): the reason (one of the Reason constants) and a
// sentence for /v1/readyz. A degraded hub shares on its node only (its stores read the cloud).
func (p *Pool) Degraded() (reason, why string) {
	if p == nil || p.cfg.Mode == ModeOff {
		return "", ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.leading:
		return "", ""
	case p.leader != "" && time.Since(p.failedAt) < p.retry:
		return ReasonLeaderUnreachable, fmt.Sprintf("pool degraded: the leader %s failed this hub (%s); sharing on this node, the leader tried again in %v",
			p.leader, p.failWhy, (p.retry - time.Since(p.failedAt)).Round(time.Second))
	case p.leader != "":
		return "", ""
	case p.cannot != "":
		return p.cannot, "pool degraded: no leader, sharing on this node; this hub cannot lead: " + p.cannotWhy
	case p.noLeaderWhy != "":
		return ReasonNoLeader, "pool degraded: no leader, sharing on this node: " + p.noLeaderWhy
	}
	return ReasonNoLeader, "pool degraded: no leader yet, sharing on this node"
}

// notifyDegraded tells Config.OnDegraded the reason when it changed, until Run has returned.
// Calls from several goroutines are told in turn (degradedMu): the last one told is the reason
// of the moment, never an older one a slower call computed.
func (p *Pool) notifyDegraded() {
	if p.cfg.OnDegraded == nil {
		return
	}
	p.degradedMu.Lock()
	defer p.degradedMu.Unlock()
	p.mu.Lock()
	ended := p.ended
	p.mu.Unlock()
	reason, _ := p.Degraded()
	if ended || reason == p.lastDegraded && p.degradedTold {
		return
	}
	p.lastDegraded, p.degradedTold = reason, true
	p.cfg.OnDegraded(reason)
}

// setCandidacy records whether this hub can serve the pool (reason "" when it can) and tells
// Config.OnCandidacy when that changed: a hub that cannot serve the pool does not stand (its lease
// loses LeaseMarks), since a leader its followers cannot reach costs the pool more than no leader
// (every follower's failed dials and its own reads of the cloud besides). It reports whether it
// changed.
func (p *Pool) setCandidacy(reason, why string) bool {
	p.mu.Lock()
	changed := reason != p.cannot || !p.candidacyTold
	if changed && reason != "" {
		p.log.Warn("pool: this hub cannot serve the pool and does not stand for its leader", "pool", p.cfg.PoolName, "reason", why)
	} else if changed && p.candidacyTold {
		p.log.Info("pool: this hub can serve the pool again and stands for its leader", "pool", p.cfg.PoolName)
	}
	if changed && reason == "" {
		p.ableSince = time.Now()
	}
	p.cannot, p.cannotWhy, p.candidacyTold = reason, why, true
	p.mu.Unlock()
	if changed && p.cfg.OnCandidacy != nil {
		p.cfg.OnCandidacy(reason)
	}
	p.notifyDegraded()
	return changed
}

// eligible reports whether this hub stands for the pool's leader (it can serve the pool).
func (p *Pool) eligible() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.candidacyTold && p.cannot == ""
}

// eligibleFor is how long this hub has been able to serve the pool (0: it cannot).
func (p *Pool) eligibleFor() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.candidacyTold || p.cannot != "" {
		return 0
	}
	return time.Since(p.ableSince)
}

// setNoLeaderWhy records why the election found no leader ("" when it found one).
func (p *Pool) setNoLeaderWhy(why string) {
	p.mu.Lock()
	p.noLeaderWhy = why
	p.mu.Unlock()
	p.notifyDegraded()
}
