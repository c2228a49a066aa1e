package main

import (
	"flag"
	"slices"
	"strings"
)

// YurtHub v1.7 compatibility of the command line: a YurtHub manifest's arguments start nodehub.
//
// Every YurtHub v1.7 flag is accepted. A flag nodehub has under YurtHub's own name is simply one of
// nodehub's (flags.go). The others are either
//   - an alias: YurtHub's name for a nodehub flag (yurthubAliases), registered on the same variable
//     and hidden from --help (the nodehub flag's help names the YurtHub one), or
//   - ignored: accepted, remembered, logged once at start-up, and hidden from --help
//     (yurthubIgnored; docs/flags.md's table "YurtHub flags nodehub ignores" says why and what to use
//     instead, and a test keeps the two in step).
//
// Like YurtHub (pflag with Kubernetes' word-separator normalization), a flag name may use '_'
// for '-': --log_dir is --log-dir.

// yurthubAliases maps a YurtHub flag name to the nodehub flag it sets.
var yurthubAliases = map[string]string{
	// YurtHub's multiplexer is nodehub's pool port: where a pool leader serves the other hubs.
	"multiplexer-port": "pool-port",
	// YurtHub binds the multiplexer to the node's IP; nodehub's pool port listens on, and a
	// leader advertises, --pool-bind-address.
	"node-ip": "pool-bind-address",
	// YurtHub's older names for the credential files.
	"kubelet-client-certificate": "client-cert",
	"kubelet-ca-file":            "ca-file",
}

// ignoredFlag is one YurtHub flag nodehub accepts and does not act on.
type ignoredFlag struct {
	name   string
	isBool bool
}

// yurthubIgnored are the accepted-and-ignored flags, in docs/flags.md's order: YurtHub's own, then the
// logging flags its libraries register (klog, component-base), then one a linked library adds.
var yurthubIgnored = []ignoredFlag{
	{"namespace", false},
	{"enable-iptables", true},
	{"enable-node-pool", true},
	{"enable-pool-service-topology", true},
	{"access-server-through-hub", true},
	{"min-request-timeout", false},
	{"host-control-plane-address", false},
	{"enable-coordinator", true},
	{"coordinator-server-addr", false},
	{"coordinator-storage-prefix", false},
	{"coordinator-storage-addr", false},
	{"leader-elect", true},
	{"leader-elect-lease-duration", false},
	{"leader-elect-renew-deadline", false},
	{"leader-elect-retry-period", false},
	{"leader-elect-resource-lock", false},
	{"leader-elect-resource-name", false},
	{"leader-elect-resource-namespace", false},
	{"cert-mgr-mode", false},
	{"yurt-hub-host", false},
	{"yurt-hub-port", false},
	{"yurt-hub-proxy-host", false},
	{"yurt-hub-proxy-port", false},
	{"yurt-hub-proxy-secure-port", false},
	{"kubeconfig", false},
	// logging (klog and component-base's global flags)
	{"logtostderr", true},
	{"alsologtostderr", true},
	{"log-dir", false},
	{"log-file", false},
	{"log-file-max-size", false},
	{"log-flush-frequency", false},
	{"skip-log-headers", true},
	{"add-dir-header", true},
	{"one-output", true},
	{"skip-headers", true},
	{"stderrthreshold", false},
	{"vmodule", false},
	{"log-backtrace-at", false},
}

// ignoredValue accepts any value and remembers that its flag was set.
type ignoredValue struct {
	name   string
	isBool bool
	set    *[]string
}

func (v *ignoredValue) String() string { return "" }
func (v *ignoredValue) Set(string) error {
	if !slices.Contains(*v.set, v.name) {
		*v.set = append(*v.set, v.name)
	}
	return nil
}
func (v *ignoredValue) IsBoolFlag() bool { return v.isBool }

// registerYurtHub adds YurtHub's aliases and ignored flags to fs (after nodehub's own flags) and
// returns the names to hide from --help.
func registerYurtHub(fs *flag.FlagSet, ignored *[]string) map[string]bool {
	hidden := map[string]bool{}
	for alias, target := range yurthubAliases {
		f := fs.Lookup(target)
		fs.Var(f.Value, alias, "YurtHub's name for --"+target)
		hidden[alias] = true
	}
	for _, f := range yurthubIgnored {
		fs.Var(&ignoredValue{name: f.name, isBool: f.isBool, set: ignored}, f.name, "accepted for YurtHub compatibility; ignored")
		hidden[f.name] = true
	}
	return hidden
}

// normalizeFlagNames rewrites '_' to '-' in flag names (not in values), as YurtHub's flag library
// does: --log_dir=/x becomes --log-dir=/x. Arguments after "--" are left alone.
func normalizeFlagNames(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "--" {
			copy(out[i:], args[i:])
			break
		}
		if !strings.HasPrefix(a, "-") || !strings.Contains(a, "_") {
			out[i] = a
			continue
		}
		name, value, hasValue := strings.Cut(a, "=")
		name = strings.ReplaceAll(name, "_", "-")
		if hasValue {
			name += "=" + value
		}
		out[i] = name
	}
	return out
}

// listValue is a comma-separated list flag with pflag's StringSlice behaviour, which YurtHub's
// list flags have: the first use replaces the default, a repeated use appends.
type listValue struct {
	p       *string
	changed bool
}

func newListValue(p *string, def string) *listValue {
	*p = def
	return &listValue{p: p}
}

func (l *listValue) String() string {
	if l.p == nil {
		return ""
	}
	return *l.p
}

func (l *listValue) Set(v string) error {
	if !l.changed || *l.p == "" {
		*l.p, l.changed = v, true
		return nil
	}
	*l.p += "," + v
	return nil
}
