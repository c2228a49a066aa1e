package hub

import (
	"time"

	"nodehub/wire"
)

// pipeMetrics are the request pipeline's counts (serve.Metrics), under the hub's names and
// YurtHub's (hubmetrics.go, poolmetrics.go).
type pipeMetrics struct {
	m  *hubMetrics
	pm *poolMetrics
}

func (x pipeMetrics) Inflight(ri *wire.RequestInfo, d float64) { x.m.inflight(ri, d) }
func (x pipeMetrics) Request(ri *wire.RequestInfo, code int, d time.Duration) {
	x.m.request(ri, code, d)
}
func (x pipeMetrics) Unauthorized(port string)                  { x.m.unauthorized.Inc(port) }
func (x pipeMetrics) Throttled(budget string)                   { x.m.throttled.Inc(budget) }
func (x pipeMetrics) Offline(verb string)                       { x.m.offline.Inc(verbLabel(verb)) }
func (x pipeMetrics) FilterError(name string)                   { x.m.filterErrors.Inc(name) }
func (x pipeMetrics) FilterAction(name, action string)          { x.m.filterActions.Inc(name, action) }
func (x pipeMetrics) NodeFromWatch()                            { x.m.nodeFromWatch.Inc() }
func (x pipeMetrics) CloudBytes(ri *wire.RequestInfo) func(int) { return x.m.cloudBytesFunc(ri) }
func (x pipeMetrics) Purpose(purpose, direction string) func(int) {
	return x.m.purposeFunc(purpose, direction)
}
func (x pipeMetrics) PoolServed(verb, resource string) { x.pm.served.Inc(verb, resource) }
func (x pipeMetrics) PoolWatches(delta int)            { x.pm.clients.Add(float64(delta)) }
