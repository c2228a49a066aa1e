package pool

import (
	"context"
	"time"
)

// A hub that cannot serve the pool (candidacy.go) only follows: while the pool has no leader it
// costs the cloud link what a node-level hub does, and no more (issue 29 item 4). It reads the
// pool's NodePool (a list, and a watch whose bookmarks come every minute) only once a leader is
// marked — it follows members only — or it turns able; until then one list of the leader's mark
// (normally empty) at start, again a minute later (a pool that starts together has elected by
// then: a heartbeat and a leader timeout), then every recheckFollowing, as a follower looks for a
// better leader. It looks again at once when it turns able (the candidacy check, on the node).

// unable holds the round of a hub that cannot lead while the NodePool is not read: one list of the
// leader's mark; when a leader is marked it starts the NodePool's read and looks again after
// retry (ok false: the round goes on as any hub's).
func (e *elector) unable(ctx context.Context, retry time.Duration) (wait time.Duration, ok bool) {
	if e.readNodePool == nil {
		return 0, false
	}
	if e.p.eligible() {
		e.startNodePool()
		return 0, false
	}
	marked, _, err := e.leases(ctx, LabelLeader+"="+e.p.cfg.PoolName)
	switch {
	case err != nil:
		return doubled(max(retry, retryLeader), e.idle, maxNoLeader), true
	case len(marked) == 0:
		return e.noLeader(retry, 0), true
	}
	e.startNodePool()
	return retry, true
}

// startNodePool starts the NodePool's read, once.
func (e *elector) startNodePool() {
	start := e.readNodePool
	e.readNodePool = nil
	start()
}

// unableWait is when a hub that cannot lead looks for a leader again after its idle-th round in a
// row without one.
func unableWait(idle int) time.Duration {
	if idle <= 1 {
		return 2 * retryLeader
	}
	return recheckFollowing
}
