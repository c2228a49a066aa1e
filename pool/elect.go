package pool

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/wire"
)

// elect takes part in the pool's election (lease mode) until ctx ends: the pool's hubs compete
// for the Lease nodehub-pool-<pool> in the cloud; the holder renews it every LeaderTimeout/2 and
// leads while it does; the others follow the holder and take over once the lease has not been
// renewed for its duration (3 × LeaderTimeout), measured on their own clock. The leader releases
// the lease when it stops.
func (p *Pool) elect(ctx context.Context) {
	e := &elector{p: p, name: "nodehub-pool-" + p.cfg.PoolName, me: p.cfg.NodeName + "@" + p.cfg.Addr,
		duration: 3 * p.cfg.LeaderTimeout}
	tick := time.NewTicker(p.cfg.LeaderTimeout / 2)
	defer tick.Stop()
	for {
		e.round(ctx)
		select {
		case <-ctx.Done():
			e.release()
			p.setLeader("", false)
			return
		case <-tick.C:
		}
	}
}

type elector struct {
	p        *Pool
	name, me string
	duration time.Duration

	lease    *wire.Lease // as last read or written
	seen     string      // holder and renewTime last seen
	seenAt   time.Time   // when seen last changed, on this hub's clock
	renewed  time.Time   // when this hub last renewed its lease
	failures int
}

func (e *elector) path() string {
	return "/apis/coordination.k8s.io/v1/namespaces/" + e.p.cfg.LeaseNamespace + "/leases"
}

// round reads the lease and acquires, renews or follows.
func (e *elector) round(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, e.p.cfg.LeaderTimeout)
	defer cancel()
	l, code, err := e.do(ctx, http.MethodGet, e.path()+"/"+e.name, nil)
	now := time.Now()
	switch {
	case code == http.StatusNotFound:
		e.acquire(ctx, nil, now)
		return
	case err != nil:
		e.failures++
		if e.failures == 3 {
			e.p.log.Warn("pool: cannot read the pool's lease", "err", err)
		}
		if e.p.Leading() && now.Sub(e.renewed) > e.duration {
			e.p.setLeader("", false) // could not renew in time: someone else may lead now
		}
		return
	}
	e.failures = 0
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	mark := holder
	if l.Spec.RenewTime != nil {
		mark += " " + l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
	}
	if mark != e.seen {
		e.seen, e.seenAt = mark, now
	}
	e.lease = l
	switch {
	case holder == e.me:
		e.renew(ctx, l, now)
	case holder == "" || now.Sub(e.seenAt) > e.duration:
		e.acquire(ctx, l, now)
	default:
		e.p.setLeader(holder, false)
	}
}

func (e *elector) acquire(ctx context.Context, l *wire.Lease, now time.Time) {
	t := metav1.NewMicroTime(now)
	secs := int32(e.duration / time.Second)
	var out *wire.Lease
	var code int
	var err error
	if l == nil {
		nl := &wire.Lease{TypeMeta: metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
			ObjectMeta: metav1.ObjectMeta{Name: e.name, Namespace: e.p.cfg.LeaseNamespace}}
		zero := int32(0)
		nl.Spec = wire.LeaseSpec{HolderIdentity: &e.me, LeaseDurationSeconds: &secs, AcquireTime: &t, RenewTime: &t, LeaseTransitions: &zero}
		out, code, err = e.do(ctx, http.MethodPost, e.path(), nl)
	} else {
		nl := *l
		trans := int32(1)
		if l.Spec.LeaseTransitions != nil {
			trans = *l.Spec.LeaseTransitions + 1
		}
		nl.Spec = wire.LeaseSpec{HolderIdentity: &e.me, LeaseDurationSeconds: &secs, AcquireTime: &t, RenewTime: &t, LeaseTransitions: &trans}
		out, code, err = e.do(ctx, http.MethodPut, e.path()+"/"+e.name, &nl)
	}
	if err != nil {
		if code != http.StatusConflict {
			e.p.log.Debug("pool: lease not acquired", "err", err)
		}
		return // someone else was faster; the next round follows them
	}
	e.lease, e.renewed = out, now
	e.p.setLeader(e.me, true)
}

func (e *elector) renew(ctx context.Context, l *wire.Lease, now time.Time) {
	nl := *l
	t := metav1.NewMicroTime(now)
	nl.Spec.RenewTime = &t
	out, _, err := e.do(ctx, http.MethodPut, e.path()+"/"+e.name, &nl)
	if err != nil {
		if now.Sub(e.renewed) > e.duration {
			e.p.setLeader("", false)
		}
		return
	}
	e.lease, e.renewed = out, now
	e.p.setLeader(e.me, true)
}

// release gives the lease up at once (holder cleared) so a follower takes over in one round.
func (e *elector) release() {
	if !e.p.Leading() || e.lease == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	nl := *e.lease
	one := int32(1)
	now := metav1.NewMicroTime(time.Now())
	nl.Spec.HolderIdentity, nl.Spec.LeaseDurationSeconds, nl.Spec.RenewTime = nil, &one, &now
	if _, _, err := e.do(ctx, http.MethodPut, e.path()+"/"+e.name, &nl); err != nil {
		e.p.log.Warn("pool: lease not released", "err", err)
	}
}

// do sends a request about the lease to the cloud (JSON both ways) and decodes the lease answered.
func (e *elector) do(ctx context.Context, method, path string, body *wire.Lease) (*wire.Lease, int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, path, rd)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", wire.MediaJSON)
	req.Header.Set("Content-Type", wire.MediaJSON)
	req.Header.Set("User-Agent", "nodehub/pool")
	resp, err := e.p.cfg.Cloud(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, resp.StatusCode, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, resp.StatusCode, fmt.Errorf("pool: %s lease: %s: %.200s", method, resp.Status, data)
	}
	var l wire.Lease
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, resp.StatusCode, fmt.Errorf("pool: lease: %w", err)
	}
	return &l, resp.StatusCode, nil
}
