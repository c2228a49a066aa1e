// Package autonomy keeps the node's Autonomy condition as YurtHub v1.7 reports it: on kubelet's
// GET of its own Node, and on each event of the node on a watch of it (kubelet's informer, which
// v1.37's kubelet reads its node from instead of a GET), the hub sets the condition in the answer
// (online from the cloud, offline from the cache) and, when it had to change it, writes it to the
// cloud's node status with the node's identity. OpenYurt's control plane keeps the pods of a
// disconnected node whose condition is True. The condition turns Unknown while the cache's writes
// fail.
package autonomy

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/wire"
)

const (
	autonomyCondition  corev1.NodeConditionType = "Autonomy"
	autonomyAnnotation                          = "node.beta.openyurt.io/autonomy"
	edgeWorkerLabel                             = "openyurt.io/is-edge-worker"
	// maxCacheFailures: the condition turns Unknown when cache writes failed at more evaluations
	// in a row than this, with no successful write since (kubelet reads its node every 10 s).
	maxCacheFailures = 3
	// autonomyRewriteAfter: a status the hub wrote is not written again before this, even if a
	// stale read (the apiserver's watch cache) does not show it yet.
	autonomyRewriteAfter = 30 * time.Second
	// evaluateEvery: how often the condition is evaluated at least, as kubelet's GET of its node
	// every nodeStatusUpdateFrequency did (see Condition.Current).
	evaluateEvery = 10 * time.Second
	// MaxNodeBody bounds a Node read whole (the cloud's answer to kubelet's GET, the answer to
	// the hub's patch).
	MaxNodeBody = 4 << 20
)

// Condition keeps the condition. Its zero value works (nothing is written to the cloud).
type Condition struct {
	// Write sets the condition in the cloud's node status; Online reports whether to try.
	Write  func(ctx context.Context, c corev1.NodeCondition) error
	Online func() bool
	// FilesWritten counts the cache's successful file writes (nil: none are counted).
	FilesWritten func() int64
	// Current, if set, returns the node as the cloud last sent it, while that copy is fresh (nil:
	// none). Run evaluates it when nothing else did for evaluateEvery: v1.37's kubelet reads its
	// node from its informer, whose events come only when the node changes, so the cache's health
	// is evaluated, and a failed write tried again, as often as on kubelet's GET of its node.
	Current func() []byte
	Log     *slog.Logger
	now     func() time.Time
	every   time.Duration // how often Run looks at Current; evaluateEvery when zero

	mu          sync.Mutex
	errs        uint64 // cache write failures so far
	lastErr     string
	seenErrs    uint64                 // errs at the last evaluation
	seenWritten int64                  // filesWritten() at the last evaluation
	failures    int                    // evaluations in a row that saw new failures and no success since
	evaluated   time.Time              // the last evaluation
	next        *corev1.NodeCondition  // the write Run makes next: the latest queued wins
	wake        chan struct{}          // tells Run a write is queued
	queued      corev1.ConditionStatus // the status last queued ("" after its write failed)
	queuedAt    time.Time
}

// CacheError counts a failed cache write.
func (a *Condition) CacheError(err error) {
	a.mu.Lock()
	a.errs++
	if err != nil {
		a.lastErr = err.Error()
	}
	a.mu.Unlock()
}

// desired returns the condition the node should carry, given what it carries now. It counts one
// evaluation of the cache's health.
func (a *Condition) desired(nf wire.NodeFacts) (corev1.ConditionStatus, string, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	// The cache fails while writes fail: an evaluation that saw new failures counts one more; one
	// that saw only successful writes ends the run; one that saw no write at all changes nothing.
	var w int64
	if a.FilesWritten != nil {
		w = a.FilesWritten()
	}
	switch {
	case a.errs != a.seenErrs:
		a.failures++
	case w != a.seenWritten || a.FilesWritten == nil:
		a.failures = 0
	}
	a.seenErrs, a.seenWritten, a.evaluated = a.errs, w, a.clock()
	if !nf.HasAnnotation || nf.Annotation != "true" || nf.HasLabel && nf.Label == "false" {
		return corev1.ConditionFalse, "autonomy disabled", "The autonomy is disabled or this node is not edge node"
	}
	switch {
	case a.failures > maxCacheFailures:
		return corev1.ConditionUnknown, "cache failed", "nodehub: cache writes failed: " + a.lastErr
	case a.failures > 0 && nf.HasCondition:
		return corev1.ConditionStatus(nf.Condition), "", "" // not yet repeated: as it is
	}
	return corev1.ConditionTrue, "autonomy enabled successfully", "The autonomy is enabled and it works fine"
}

// Apply returns the node with the condition as it should be: raw itself when it already is (the
// common case, read without decoding), else re-encoded in its own format; changed says which. A
// node it cannot read is returned as it is.
func (a *Condition) Apply(raw []byte) ([]byte, *corev1.NodeCondition) {
	nf, err := wire.ReadNodeFacts(raw, autonomyAnnotation, edgeWorkerLabel, string(autonomyCondition))
	if err != nil {
		return raw, nil
	}
	status, reason, message := a.desired(nf)
	if nf.HasCondition && corev1.ConditionStatus(nf.Condition) == status {
		return raw, nil
	}
	obj, err := wire.Decode(raw)
	node, ok := obj.(*corev1.Node)
	if err != nil || !ok {
		return raw, nil
	}
	now := metav1.NewTime(a.clock().Truncate(time.Second))
	c := corev1.NodeCondition{Type: autonomyCondition, Status: status, Reason: reason, Message: message, LastHeartbeatTime: now, LastTransitionTime: now}
	set := false
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == autonomyCondition {
			node.Status.Conditions[i] = c
			set = true
		}
	}
	if !set {
		node.Status.Conditions = append(node.Status.Conditions, c)
	}
	out, err := wire.Encode(node, wire.IsProtobuf(raw))
	if err != nil {
		return raw, nil
	}
	return out, &c
}

func (a *Condition) clock() time.Time {
	if a.now != nil {
		return a.now()
	}
	return time.Now()
}

// Seen tells the hub what the cloud's node carries, and queues a write of the condition there
// when it had to change (made by Run, only online). A status queued within autonomyRewriteAfter is
// not queued again (a stale read, or a second watch of the node, saw the node before the write);
// a newer status replaces a write not yet made, so the last one seen is the one written.
func (a *Condition) Seen(c *corev1.NodeCondition) {
	if c == nil || a.Write == nil || (a.Online != nil && !a.Online()) {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.clock()
	if a.queued == c.Status && now.Sub(a.queuedAt) < autonomyRewriteAfter {
		return
	}
	cc := *c
	a.next, a.queued, a.queuedAt = &cc, c.Status, now
	select {
	case a.wakeup() <- struct{}{}:
	default: // Run is told already
	}
}

// wakeup returns the channel that tells Run a write is queued; a.mu is held.
func (a *Condition) wakeup() chan struct{} {
	if a.wake == nil {
		a.wake = make(chan struct{}, 1)
	}
	return a.wake
}

// Run makes the writes Seen queues, one at a time, each within 10 s, and evaluates Current when
// nothing else did for evaluateEvery, until ctx ends.
func (a *Condition) Run(ctx context.Context) {
	a.mu.Lock()
	wake := a.wakeup()
	a.mu.Unlock()
	every := a.every
	if every <= 0 {
		every = evaluateEvery
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			a.evaluate(every)
			continue
		case <-wake:
		}
		a.mu.Lock()
		c := a.next
		a.next = nil
		a.mu.Unlock()
		if c != nil {
			a.write(ctx, *c)
		}
	}
}

// evaluate evaluates the node Current returns, when nothing else did for every.
func (a *Condition) evaluate(every time.Duration) {
	if a.Current == nil {
		return
	}
	a.mu.Lock()
	idle := a.clock().Sub(a.evaluated) >= every*9/10 // a tick late or early by a little still counts
	a.mu.Unlock()
	if !idle {
		return
	}
	if raw := a.Current(); raw != nil {
		a.Node(raw)
	}
}

// write sets c in the cloud; after a failure, the next evaluation that needs it queues it again.
func (a *Condition) write(ctx context.Context, c corev1.NodeCondition) {
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := a.Write(wctx, c)
	cancel()
	if err != nil {
		a.mu.Lock()
		if a.queued == c.Status && a.next == nil {
			a.queued = ""
		}
		a.mu.Unlock()
		a.logger().Warn("autonomy: could not write the node's condition", "status", c.Status, "err", err)
		return
	}
	a.logger().Info("autonomy: node condition written", "status", c.Status, "reason", c.Reason)
}

func (a *Condition) logger() *slog.Logger {
	if a.Log == nil {
		return slog.Default()
	}
	return a.Log
}

// Node is what kubelet is shown of its node: Apply, then Seen of what had to change.
func (a *Condition) Node(raw []byte) []byte {
	out, c := a.Apply(raw)
	a.Seen(c)
	return out
}

// Response sets the condition in the cloud's answer to kubelet's GET of its node (read whole: one
// object; a body held whole already, wire.Whole, is not read again) and writes it to the cloud
// when it had to change. An answer it cannot read whole passes as it is.
func (a *Condition) Response(resp *http.Response) {
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "" || resp.ContentLength > MaxNodeBody {
		return
	}
	w, ok := wire.ReadWhole(resp, MaxNodeBody)
	if !ok {
		return
	}
	body := w.Bytes()
	out := a.Node(body)
	if len(out) == len(body) && (len(out) == 0 || &out[0] == &body[0]) {
		return // unchanged: the body held whole as it is
	}
	resp.Body = wire.NewWhole(out)
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
}

// Patch is the strategic merge patch of a node's status that sets condition c (conditions merge
// by type, so kubelet's own are untouched).
func Patch(c corev1.NodeCondition) ([]byte, error) {
	return json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{c}}})
}
