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
// the NodePool's (apps.openyurt.io/v1beta2) status.leaderEndpoints, read every 2 × LeaderTimeout.
// An address without a port gets this hub's pool port.
func (p *Pool) followNodePool(ctx context.Context) {
	_, port, _ := net.SplitHostPort(p.cfg.Addr)
	tick := time.NewTicker(2 * p.cfg.LeaderTimeout)
	defer tick.Stop()
	for {
		if leader, ok := p.readNodePool(ctx); ok {
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

func (p *Pool) readNodePool(ctx context.Context) (poolLeader, bool) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.LeaderTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "/apis/apps.openyurt.io/v1beta2/nodepools/"+p.cfg.PoolName, nil)
	if err != nil {
		return poolLeader{}, false
	}
	req.Header.Set("Accept", wire.MediaJSON)
	req.Header.Set("User-Agent", "nodehub/pool")
	resp, err := p.cfg.Cloud(req)
	if err != nil {
		return poolLeader{}, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return poolLeader{}, false
	}
	var np struct {
		Status struct {
			LeaderEndpoints []poolLeader `json:"leaderEndpoints"`
		} `json:"status"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&np); err != nil {
		return poolLeader{}, false
	}
	if len(np.Status.LeaderEndpoints) == 0 {
		return poolLeader{}, true
	}
	return np.Status.LeaderEndpoints[0], true
}
