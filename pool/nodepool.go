package pool

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"time"

	"nodehub/wire"
)

// followNodePool follows the leader OpenYurt's yurt-manager elects (nodepool mode): the first of
// the NodePool's (apps.openyurt.io/v1beta2) status.leaderEndpoints that is one of the pool's
// members (AnnotationMembers: yurt-manager elects among nodes that can label themselves into the
// pool), read every 2 × LeaderTimeout. An address without a port gets this hub's pool port.
func (p *Pool) followNodePool(ctx context.Context) {
	_, port, _ := net.SplitHostPort(p.cfg.Addr)
	tick := time.NewTicker(2 * p.cfg.LeaderTimeout)
	defer tick.Stop()
	var refused refusal
	for {
		if np, ok := p.readNodePool(ctx); ok {
			leader, why := np.leader(p.cfg.PoolName)
			members := np.members
			if members == nil {
				members = map[string]bool{} // none named: nobody's notes (nil would be anyone's)
			}
			p.notes.setMembers(members)
			if refused.set(why, time.Now(), 2*p.cfg.LeaderTimeout) {
				p.log.Warn("pool: nodepool mode follows no leader, this hub shares on its node only: "+why, "pool", p.cfg.PoolName)
			}
			holder := ""
			if leader.Address != "" {
				addr := leader.Address
				if _, _, err := net.SplitHostPort(addr); err != nil {
					addr = net.JoinHostPort(addr, port)
				}
				holder = leader.NodeName + "@" + addr
			}
			p.setLeader(holder, leader.NodeName == p.cfg.NodeName && holder != "")
		}
		select {
		case <-ctx.Done():
			p.setLeader("", false)
			return
		case <-tick.C:
		}
	}
}

type poolLeader struct {
	NodeName string `json:"nodeName"`
	Address  string `json:"address"`
}

// publishedPool is what nodepool mode reads of the NodePool.
type publishedPool struct {
	leaders []poolLeader
	members map[string]bool // nil: the NodePool names none (AnnotationMembers)
}

// leader returns the first published leader that is a member (none: why).
func (np publishedPool) leader(pool string) (poolLeader, string) {
	if np.members == nil {
		return poolLeader{}, noMembersWhy(pool)
	}
	for _, l := range np.leaders {
		if np.members[l.NodeName] {
			return l, ""
		}
	}
	if len(np.leaders) > 0 {
		return poolLeader{}, "the NodePool " + pool + " publishes no leader among its members (" + AnnotationMembers + "): " + np.leaders[0].NodeName + " is not one"
	}
	return poolLeader{}, ""
}

func (p *Pool) readNodePool(ctx context.Context) (publishedPool, bool) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.LeaderTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "/apis/apps.openyurt.io/v1beta2/nodepools/"+p.cfg.PoolName, nil)
	if err != nil {
		return publishedPool{}, false
	}
	req.Header.Set("Accept", wire.MediaJSON)
	req.Header.Set("User-Agent", "nodehub/pool")
	resp, err := p.cfg.Cloud(req)
	if err != nil {
		return publishedPool{}, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return publishedPool{}, false
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return publishedPool{}, false
	}
	var np struct {
		Status struct {
			LeaderEndpoints []poolLeader `json:"leaderEndpoints"`
		} `json:"status"`
	}
	if err := json.Unmarshal(raw, &np); err != nil {
		return publishedPool{}, false
	}
	members, _, _ := nodePoolMembers(raw)
	return publishedPool{leaders: np.Status.LeaderEndpoints, members: members}, true
}
