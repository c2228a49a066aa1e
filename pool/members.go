package pool

import (
	"encoding/json"
	"strings"
	"time"
)

// AnnotationMembers, on the pool's NodePool, names the nodes an administrator lets lead the pool
// and file its notes (comma-separated node names). A node can put itself in any NodePool: its
// status.nodes follows the Nodes' apps.openyurt.io/nodepool label, which NodeRestriction lets a
// node write on its own Node. A NodePool a node cannot write: the node group has no write on
// nodepools.apps.openyurt.io. A member is a node both in status.nodes and in this list; a NodePool
// without the annotation names no members, and nobody leads its pool (every hub shares on its
// node only) unless the operator accepts self-declared membership (Config.SelfDeclared).
const AnnotationMembers = "nodehub.io/members"

// nodePoolMembers reads a NodePool (JSON): members are the nodes in both status.nodes and
// AnnotationMembers (nil when the annotation names nobody: named is false), declared are
// status.nodes (never nil).
func nodePoolMembers(raw []byte) (members, declared map[string]bool, named bool) {
	var np struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Status struct {
			Nodes []string `json:"nodes"`
		} `json:"status"`
	}
	declared = map[string]bool{}
	if json.Unmarshal(raw, &np) != nil {
		return nil, declared, false
	}
	for _, n := range np.Status.Nodes {
		declared[n] = true
	}
	admin := adminNamed(np.Metadata.Annotations[AnnotationMembers])
	if len(admin) == 0 {
		return nil, declared, false
	}
	members = map[string]bool{}
	for n := range admin {
		if declared[n] {
			members[n] = true
		}
	}
	return members, declared, true
}

// adminNamed parses AnnotationMembers' value: node names separated by commas (spaces ignored).
func adminNamed(v string) map[string]bool {
	out := map[string]bool{}
	for _, n := range strings.Split(v, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out[n] = true
		}
	}
	return out
}

// noMembersWhy says why a pool whose NodePool was read has no members.
func noMembersWhy(pool string) string {
	return "the NodePool " + pool + " names no members (its annotation " + AnnotationMembers +
		": the nodes, also in its status.nodes, an administrator lets lead the pool and file notes)"
}

// refusal is why a pool has no leader, logged once it has lasted a while (a hub just started has
// not read its NodePool yet).
type refusal struct {
	why    string
	since  time.Time
	logged bool
}

// set records why (""clears it) and returns whether to log it now: once it has lasted after.
func (r *refusal) set(why string, now time.Time, after time.Duration) bool {
	if why != r.why {
		r.why, r.since, r.logged = why, now, false
	}
	if why == "" || r.logged || now.Sub(r.since) < after {
		return false
	}
	r.logged = true
	return true
}
