package cache

import "testing"

// A log's name is resource.version.group ("core" for the empty group), and parseLogName reverses it.
func TestLogNameRoundTrip(t *testing.T) {
	for _, r := range []Resource{{Resource: "pods", Version: "v1"}, {Resource: "leases", Version: "v1", Group: "coordination.k8s.io"}} {
		res, ver, group, ok := parseLogName(logName(r))
		if !ok || res != r.Resource || ver != r.Version || group != r.Group {
			t.Errorf("%+v: parsed %q %q %q %v", r, res, ver, group, ok)
		}
	}
	for _, bad := range []string{"", "pods", "pods.v1", ".v1.core", "pods..core"} {
		if _, _, _, ok := parseLogName(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}
