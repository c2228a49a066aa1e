// Package endpointfix keeps the EndpointSlices nodehub serves true to this node's pods while the
// cloud cannot hear kubelet: after an offline reboot the node's pods come back with new IPs and
// are not ready for a while, and kubelet says so to the hub, but the slices the cloud last sent
// still name the old IPs. Each endpoint whose nodeName is this node and whose targetRef is one of
// the pods kubelet reported offline takes that report, as the EndpointSlice controller would
// derive it (pod.go); every other endpoint, and every other byte of a slice, is left as it is.
//
// The Fixer is the one place that knows the reports: it learns them from kubelet's status writes
// applied offline (Reported) and, at start, from those the cache holds (the offline copies are
// marked local there until the cloud's replace them), so a hub restarted offline corrects from its
// first answer. Every change makes a new immutable view and closes a channel: lists read the view
// of the moment, watches compare the view they served last with the new one and send the slices
// that changed as MODIFIED (Watch). After the link returns, a pod stays corrected until the cloud's
// copy of it says what kubelet reported (kubelet's status write answered by the cloud) and every
// slice the hub corrected for it came from the cloud saying the same, or for Bound at most; then
// the cloud's bytes pass untouched; while kubelet's newer report of it is on its way to the
// cloud, the cloud's word on it at the reported address passes (sending.go). A pod the slices place on this node that kubelet's cached pod
// list does not hold is not ready while offline (Gone; the hub finds them). v1 Endpoints are
// corrected the same way (endpoints.go). In a pool, each hub shares its own reports (Shared) and
// takes the others' (SetForeign), each applied only to endpoints on the node that reported it.
// Memory: one report per pod of this node, a few slice names each, the pool's reports (all
// bounded), and per view a bounded memory of the slices it left unchanged.
package endpointfix

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds.
const (
	// MaxPods bounds the pods corrected at once (a node runs 110 by default).
	MaxPods = 1024
	// maxSlices bounds the slices remembered per pod (past it, the pod is corrected until Bound).
	maxSlices = 32
	// DefaultBound is Fixer.Bound's default.
	DefaultBound = 2 * time.Minute
)

// Fixer holds the reports of this node's pods that the cloud has not caught up with, and serves
// views of them. Safe for concurrent use.
type Fixer struct {
	node  string
	bound time.Duration
	log   *slog.Logger

	mu       sync.Mutex
	entries  map[string]*entry
	online   bool
	returned time.Time // when the link came back (zero while offline)
	changed  chan struct{}
	gen      uint64
	cur      atomic.Pointer[view]
	isOnline atomic.Bool
	count    atomic.Int64 // endpoints being corrected
	full     bool         // MaxPods reached (logged once)
	// foreign are the reports the pool's other hubs share, by node (each only its own node's).
	foreign map[string][]Pod
	// retired are the reports of pods whose correction ended, for the older copies of their
	// slices (retired.go).
	retired map[string]Pod
}

type entry struct {
	report Pod
	// cloudAgrees: the cloud's copy of the pod says what kubelet reported.
	cloudAgrees bool
	// slices are the slices (namespace/name) served corrected for this pod that the cloud has not
	// been seen to correct itself since, each with the resourceVersion it had when corrected last.
	slices map[string]string
	// pending counts kubelet's status writes of the pod on their way to the cloud (sending.go).
	pending int
	// agreed are the slices seen from the cloud saying what kubelet reported since they were
	// corrected, each with its resourceVersion then (retired.go).
	agreed map[string]string
}

// New returns a Fixer for node. bound <= 0 means DefaultBound. It starts offline: corrections
// apply until Run learns the link is up, and then for at most bound.
func New(node string, bound time.Duration, log *slog.Logger) *Fixer {
	if bound <= 0 {
		bound = DefaultBound
	}
	if log == nil {
		log = slog.Default()
	}
	f := &Fixer{node: node, bound: bound, log: log, entries: map[string]*entry{}, retired: map[string]Pod{}, changed: make(chan struct{})}
	f.cur.Store(&view{node: node})
	return f
}

// view is the current view.
func (f *Fixer) view() *view { return f.cur.Load() }

// Active reports whether any endpoint may be corrected now (cheap: the hot path asks it first).
func (f *Fixer) Active() bool { return len(f.view().pods) > 0 }

// Corrected is how many endpoints are served corrected now (the metric).
func (f *Fixer) Corrected() int64 { return f.count.Load() }

// Pods is how many of this node's pods are being corrected now.
func (f *Fixer) Pods() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.entries)
}

// Changed returns a channel closed at the next change of the view.
func (f *Fixer) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

// publishLocked makes a new view of the entries and wakes whoever waits on Changed.
func (f *Fixer) publishLocked() {
	f.gen++
	pods := make(map[string]Pod, len(f.entries))
	var n int64
	for node, ps := range f.foreign {
		for _, p := range ps {
			pods[podID(node, p.Key())] = p
		}
	}
	for k, p := range f.retired {
		pods[podID(f.node, k)] = p
	}
	for _, e := range f.entries {
		p := e.report
		if e.pending > 0 {
			p.Pending, p.stale = true, maps.Clone(e.slices)
		}
		pods[podID(f.node, p.Key())] = p
		n += int64(len(e.slices))
	}
	f.cur.Store(&view{gen: f.gen, node: f.node, pods: pods})
	f.count.Store(n)
	close(f.changed)
	f.changed = make(chan struct{})
}

// Reported takes kubelet's report of a pod of this node: its status write applied offline (the
// pod as now cached), or a local copy found in the cache at start. A pod of another node, or
// bytes that are not a pod, are ignored.
func (f *Fixer) Reported(raw []byte) {
	p, err := PodOf(raw)
	if err != nil {
		return
	}
	f.report(p)
}

func (f *Fixer) report(p Pod) {
	if p.Node != f.node || p.Name == "" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.entries[p.Key()]
	if e == nil {
		if len(f.entries) >= MaxPods {
			if !f.full {
				f.full = true
				f.log.Warn("endpointfix: too many pods reported offline; the rest are not corrected", "max", MaxPods)
			}
			return
		}
		e = &entry{slices: map[string]string{}}
		f.entries[p.Key()] = e
		delete(f.retired, p.Key())
	} else if e.report.same(p) && !e.cloudAgrees {
		return
	}
	e.report, e.cloudAgrees = p, false
	f.publishLocked()
}

// Gone takes a pod of this node that an EndpointSlice names but kubelet's pod list (as cached)
// does not hold, or holds as another pod (uid): it does not run here, so its endpoints are not
// ready. A pod kubelet reported is left as reported. The cloud wins for such pods as soon as it
// is back (kubelet may start them now).
func (f *Fixer) Gone(namespace, name, uid string) {
	p := Pod{Namespace: namespace, Name: name, UID: uid, Node: f.node, Gone: true}
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.entries[p.Key()]; e != nil || len(f.entries) >= MaxPods {
		return
	}
	f.entries[p.Key()] = &entry{report: p, slices: map[string]string{}}
	f.publishLocked()
}

// ReportedOnline takes the cloud's answer to kubelet's status write of a pod while the link is up:
// the cloud has kubelet's report now. A pod being corrected takes it as its report (kubelet may
// have said something new) and is retired once the slices caught up. Others are ignored.
func (f *Fixer) ReportedOnline(raw []byte) {
	p, err := PodOf(raw)
	if err != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.entries[p.Key()]
	if e == nil {
		return
	}
	changed := !e.report.same(p)
	e.report, e.cloudAgrees = p, true
	if f.retireLocked(p.Key(), e) || changed {
		f.publishLocked()
	}
}

// observe records what serving a slice showed: an endpoint corrected, or one that already said
// what kubelet reported in a slice the cloud sent (online).
func (f *Fixer) observe(slice, rv, id string, fixed bool) {
	node, pod, _ := strings.Cut(id, "|")
	if node != f.node {
		return // another hub's pod: that hub keeps its account
	}
	online := f.isOnline.Load()
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.entries[pod]
	if e == nil {
		return
	}
	_, had := e.slices[slice]
	switch {
	case fixed && had:
		e.slices[slice] = rv
	case fixed && len(e.slices) < maxSlices:
		e.slices[slice] = rv
		f.count.Add(1)
	case !fixed && online && had:
		delete(e.slices, slice)
		if e.agreed == nil {
			e.agreed = map[string]string{}
		}
		e.agreed[slice] = rv
		f.count.Add(-1)
		if f.retireLocked(pod, e) {
			f.publishLocked()
		}
	}
}

// SetOnline tells the Fixer whether the cloud is reachable. Going offline restarts the return's
// clock; coming back starts it.
func (f *Fixer) SetOnline(online bool, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.online == online {
		return
	}
	f.online = online
	f.isOnline.Store(online)
	f.returned = time.Time{}
	if !online {
		if len(f.retired) > 0 {
			clear(f.retired)
			f.publishLocked()
		}
		return
	}
	f.returned = now
	changed := false
	for k, e := range f.entries {
		if e.report.Gone {
			delete(f.entries, k)
			changed = true
			continue
		}
		changed = f.retireLocked(k, e) || changed
	}
	if changed {
		f.publishLocked()
	}
}

// expire ends every correction once the link has been back for Bound: the cloud wins.
func (f *Fixer) expire(now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.online || f.returned.IsZero() || now.Sub(f.returned) < f.bound || len(f.entries) == 0 && len(f.retired) == 0 {
		return
	}
	f.log.Info("endpointfix: the cloud's endpoints are served as they are again", "pods", len(f.entries), "after", f.bound)
	clear(f.entries)
	clear(f.retired)
	f.publishLocked()
}

// MaxForeignPods bounds the reports kept for the pool's other nodes, all together.
const MaxForeignPods = 16 * MaxPods

// SetForeign takes the reports the pool's other hubs share, by node (what each published:
// Shared's JSON). A node's report counts only for pods of that node, and only for endpoints on it;
// this node's own name is ignored. Bounded by MaxForeignPods.
func (f *Fixer) SetForeign(docs map[string][]byte) {
	foreign := map[string][]Pod{}
	total := 0
	for node, doc := range docs {
		if node == f.node {
			continue
		}
		var pods []Pod
		if json.Unmarshal(doc, &pods) != nil {
			continue
		}
		for _, p := range pods {
			if p.Node != node || p.Name == "" || total >= MaxForeignPods {
				continue
			}
			foreign[node] = append(foreign[node], p)
			total++
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if reflect.DeepEqual(foreign, f.foreign) || len(foreign) == 0 && len(f.foreign) == 0 {
		return
	}
	f.foreign = foreign
	f.publishLocked()
}

// Shared is this hub's reports for the pool (JSON): the pods of this node being corrected.
func (f *Fixer) Shared() []byte {
	f.mu.Lock()
	pods := make([]Pod, 0, len(f.entries))
	for _, e := range f.entries {
		pods = append(pods, e.report)
	}
	f.mu.Unlock()
	slices.SortFunc(pods, func(a, b Pod) int { return strings.Compare(a.Key(), b.Key()) })
	b, _ := json.Marshal(pods)
	return b
}

// Link is the cloud's reachability as Run follows it.
type Link struct {
	// Online: known reachable; Lost: known unreachable (neither: no verdict yet); Changed returns
	// a channel closed at the next change.
	Online, Lost func() bool
	Changed      func() <-chan struct{}
	// OnLost, if set, is called (in Run's goroutine) each time the link is found lost.
	OnLost func()
}

// Run follows the link until ctx ends, and ends the corrections Bound after it returned.
func (f *Fixer) Run(ctx context.Context, l Link) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	wasLost := false
	for {
		ch := l.Changed()
		f.SetOnline(l.Online(), time.Now())
		lost := l.Lost()
		if lost && !wasLost && l.OnLost != nil {
			l.OnLost()
		}
		wasLost = lost
		f.expire(time.Now())
		select {
		case <-ctx.Done():
			return
		case <-ch:
		case <-tick.C:
		}
	}
}
