package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"nodehub/cache"
	"nodehub/filter"
	"nodehub/hub"
	"nodehub/node/certs"
	"nodehub/node/dummyif"
	"nodehub/pool"
)

// options are the command line, with YurtHub's flag names where YurtHub has one.
type options struct {
	serverAddr        string
	nodeName          string
	nodePoolName      string
	bindAddress       string
	servePort         int
	bindProxyAddress  string
	proxyPort         int
	diskCachePath     string
	rootDir           string
	lbMode            string
	hbInterval        int
	hbFailedRetry     int
	hbHealthy         int
	hbTimeout         int
	kubeletGrace      time.Duration
	bootstrapMode     string
	kubeletKubeconfig string
	clientCert        string
	clientKey         string
	caFile            string
	joinToken         string
	bootstrapFile     string
	caHashes          string
	skipCAVerify      bool
	hubCertOrgs       string
	allowRemoteProxy  bool
	remoteMetrics     bool
	verbosity         int
	maxProcs          int
	timerSlack        time.Duration
	cacheAgents       string
	noCacheAgents     string
	cacheSync         time.Duration
	gcFrequency       int
	filterEnabled     bool
	filterDisabled    string
	filterComponents  componentsFlag
	workingMode       string
	masterHost        string
	proxySecurePort   int
	maxInFlight       int
	memoryLimit       string
	cacheMaxBytes     string
	profiling         bool
	version           bool
	dummyIfEnabled    bool
	dummyIfName       string
	dummyIfIP         string
	dummyIfCleanup    bool
	staticPodPath     string
	poolResources     string
	poolMode          string
	poolLeaseNS       string
	poolBindAddress   string
	poolPort          int
	poolLeaderTimeout time.Duration
	poolSelfDeclared  bool

	// ignored are the YurtHub flags that were set but nodehub does not act on (yurthubflags.go).
	ignored []string
}

// errHelp is returned for -h/--help after the usage was printed.
var errHelp = flag.ErrHelp

// parseFlags reads the command line. Errors are one line naming the flag and the reason.
func parseFlags(args []string, usageOut io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("nodehub", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.registerCloud(fs)
	o.registerCredentials(fs)
	o.registerServing(fs)
	o.registerCache(fs)
	o.registerNode(fs)
	o.registerPool(fs)
	hidden := registerYurtHub(fs, &o.ignored)
	if err := fs.Parse(normalizeFlagNames(args)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(usageOut, fs, hidden)
			return nil, errHelp
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: nodehub takes flags only", fs.Arg(0))
	}
	if o.version {
		return o, nil
	}
	return o, o.validate()
}

// registerCloud registers the cloud's flags: the servers, balancing, heartbeats, working mode.
func (o *options) registerCloud(fs *flag.FlagSet) {
	fs.StringVar(&o.serverAddr, "server-addr", "", "cloud kube-apiservers, comma separated")
	fs.StringVar(&o.lbMode, "lb-mode", hub.DefaultLBMode, "load balancing over cloud servers: rr or priority")
	fs.IntVar(&o.hbInterval, "heartbeat-interval-seconds", int(hub.DefaultHeartbeatInterval/time.Second), "seconds between heartbeats to each cloud server")
	fs.IntVar(&o.hbFailedRetry, "heartbeat-failed-retry", hub.DefaultHeartbeatFailed, "failed heartbeats that make a server unhealthy")
	fs.IntVar(&o.hbHealthy, "heartbeat-healthy-threshold", hub.DefaultHeartbeatHealthy, "good heartbeats that make it healthy again")
	fs.IntVar(&o.hbTimeout, "heartbeat-timeout-seconds", int(hub.DefaultHeartbeatTimeout/time.Second), "timeout of a heartbeat and of a connect")
	fs.StringVar(&o.workingMode, "working-mode", "edge", "edge or cloud (YurtHub's local mode is not supported)")
}

// registerCredentials registers the node's credentials: bootstrap, kubelet's files, CA pins.
func (o *options) registerCredentials(fs *flag.FlagSet) {
	fs.StringVar(&o.bootstrapMode, "bootstrap-mode", certs.ModeToken, "token: obtain the node's certificate with --join-token or --bootstrap-file (without either, kubelet's credentials); kubeletcertificate: use kubelet's certificate and CA")
	fs.StringVar(&o.joinToken, "join-token", "", "bootstrap token (abcdef.0123456789abcdef) the node joins with")
	fs.StringVar(&o.bootstrapFile, "bootstrap-file", "", "bootstrap kubeconfig used instead of --join-token")
	fs.Var(newListValue(&o.caHashes, ""), "discovery-token-ca-cert-hash", "sha256:<hex> pins of the cluster CA's public key, comma separated (repeatable)")
	fs.BoolVar(&o.skipCAVerify, "discovery-token-unsafe-skip-ca-verification", false, "trust the CA cluster-info names without a pin")
	fs.Var(newListValue(&o.hubCertOrgs, ""), "hub-cert-organizations", "organizations added to system:nodes in the node's certificate, comma separated (repeatable)")
	fs.StringVar(&o.kubeletKubeconfig, "kubelet-kubeconfig", certs.KubeletKubeconfig, "kubelet's kubeconfig (for its CA and certificate)")
	fs.StringVar(&o.clientCert, "client-cert", "", "node client certificate PEM (may hold the key; YurtHub: --kubelet-client-certificate)")
	fs.StringVar(&o.clientKey, "client-key", "", "node client key PEM (default: --client-cert)")
	fs.StringVar(&o.caFile, "ca-file", "", "cluster CA PEM (YurtHub: --kubelet-ca-file)")
}

// registerServing registers the hub's ports and link: where it listens, for whom, how much.
func (o *options) registerServing(fs *flag.FlagSet) {
	fs.StringVar(&o.bindAddress, "bind-address", "127.0.0.1", "address of the hub's endpoints")
	fs.IntVar(&o.servePort, "serve-port", 10267, "port of the hub's own endpoints")
	fs.StringVar(&o.bindProxyAddress, "bind-proxy-address", "127.0.0.1", "address of the proxy port")
	fs.IntVar(&o.proxyPort, "proxy-port", 10261, "plain-HTTP proxy port")
	fs.BoolVar(&o.allowRemoteProxy, "insecure-allow-remote-proxy", false, "allow --bind-proxy-address to be a non-loopback address (its clients must bring their own credentials)")
	fs.BoolVar(&o.remoteMetrics, "allow-remote-metrics", false, "serve /metrics on the hub port to any address (default: only health and readiness answer beyond loopback)")
	fs.StringVar(&o.masterHost, "master-service-host", "169.254.2.1", "the hub's secure address, as filters give it to pods")
	fs.IntVar(&o.proxySecurePort, "proxy-secure-port", 10268, "the hub's HTTPS port for pods")
	fs.IntVar(&o.maxInFlight, "max-requests-in-flight", 250, "proxied requests served at once (watches and exec not counted); beyond it 429; 0: no limit")
	fs.BoolVar(&o.profiling, "profiling", false, "serve /debug/pprof/ on the hub's port")
	fs.BoolVar(&o.dummyIfEnabled, "enable-dummy-if", true, "keep the hub's address on a dummy link and serve the proxy port there too")
	fs.StringVar(&o.dummyIfName, "dummy-if-name", dummyif.DefaultName, "name of the hub's link (at most 15 characters)")
	fs.StringVar(&o.dummyIfIP, "dummy-if-ip", "", "the hub's address on the link (default 169.254.2.1; fd00::2:1 on an IPv6 node)")
	fs.BoolVar(&o.dummyIfCleanup, "cleanup-dummy-if", false, "remove the hub's link when nodehub stops")
}

// registerCache registers the cache's and the response filters' flags.
func (o *options) registerCache(fs *flag.FlagSet) {
	fs.StringVar(&o.diskCachePath, "disk-cache-path", "/etc/kubernetes/cache/", "directory of the local cache")
	fs.StringVar(&o.cacheAgents, "cache-agents", cache.DefaultAgents, "components whose reads are cached; * for all")
	fs.StringVar(&o.noCacheAgents, "no-cache-agents", "", "components never cached")
	fs.DurationVar(&o.cacheSync, "cache-sync-interval", hub.DefaultCacheSyncInterval, "how often cache writes are made durable")
	fs.IntVar(&o.gcFrequency, "gc-frequency", int(hub.DefaultGCFrequency/time.Minute), "minutes between cache collections")
	fs.BoolVar(&o.filterEnabled, "enable-resource-filter", true, "run the response filters")
	fs.Var(newListValue(&o.filterDisabled, ""), "disabled-resource-filters", "filters turned off, comma separated (repeatable); * for all")
	fs.Var(&o.filterComponents, "filter-components", "name=comp1,comp2: add components to a filter (repeatable)")
	fs.StringVar(&o.cacheMaxBytes, "cache-max-bytes", "", "stop caching new objects once the cache takes this much (e.g. 200Mi); empty: no limit")
}

// registerNode registers the node's and the process's flags: name, files, kubelet, memory, logs.
func (o *options) registerNode(fs *flag.FlagSet) {
	fs.StringVar(&o.nodeName, "node-name", "", "name of this node (default: the host name, lower-cased)")
	fs.StringVar(&o.rootDir, "root-dir", "/var/lib/nodehub", "directory of the hub's files")
	fs.DurationVar(&o.kubeletGrace, "kubelet-health-grace-period", hub.DefaultKubeletGracePeriod, "stop renewing the node lease after kubelet is quiet this long")
	fs.StringVar(&o.memoryLimit, "memory-limit", "", "the Go runtime's soft memory limit (e.g. 64Mi); empty: 14Mi during start-up (until the shared stores hold their first lists), then none")
	fs.IntVar(&o.maxProcs, "max-procs", 1, "cores the hub runs on (GOMAXPROCS)")
	fs.DurationVar(&o.timerSlack, "timer-slack", defaultTimerSlack, "how late the kernel may wake the hub's sleeping threads, to wake them together (0: the system's)")
	fs.IntVar(&o.verbosity, "v", 2, "log verbosity: 4 or more logs debug lines")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	fs.StringVar(&o.staticPodPath, "static-pod-path", "/etc/kubernetes/manifests", "kubelet's static pod manifest directory (OTA upgrades of static pods write there)")
}

// registerPool registers the pool-sharing flags.
func (o *options) registerPool(fs *flag.FlagSet) {
	fs.StringVar(&o.nodePoolName, "nodepool-name", "", "name of this node's node pool")
	fs.Var(newListValue(&o.poolResources, pool.DefaultResources), "pool-scope-resources", "resources shared from one list+watch (group/version/resource, comma separated, repeatable; empty: no sharing)")
	fs.StringVar(&o.poolMode, "pool-mode", pool.ModeOff, "pool sharing: off (node level only), lease (elect a leader with a Lease) or nodepool (follow yurt-manager's leader)")
	fs.StringVar(&o.poolLeaseNS, "pool-lease-namespace", hub.DefaultPoolLeaseNamespace, "namespace of the node Leases the pool's election reads in lease mode")
	fs.StringVar(&o.poolBindAddress, "pool-bind-address", "", "this hub's address in the pool: the pool port listens there and a leader advertises it (YurtHub: --node-ip)")
	fs.IntVar(&o.poolPort, "pool-port", 10269, "the pool port (mTLS) where a leader serves the other hubs (YurtHub: --multiplexer-port)")
	fs.DurationVar(&o.poolLeaderTimeout, "pool-leader-timeout", hub.DefaultPoolLeaderTimeout, "a silent or unreachable leader is given up after this long")
	fs.BoolVar(&o.poolSelfDeclared, "pool-self-declared-membership", false, "lease mode without an OpenYurt NodePool: let any node that labels its own Lease with the pool lead it (any node can: only where every node is trusted); off, lease mode elects only among the NodePool's members (its nodehub.io/members annotation, and in status.nodes) and nobody without them")
}

// printUsage prints the flags that work: YurtHub's aliases and ignored flags are left out (docs/flags.md
// lists them).
func printUsage(out io.Writer, fs *flag.FlagSet, hidden map[string]bool) {
	shown := flag.NewFlagSet("nodehub", flag.ContinueOnError)
	fs.VisitAll(func(f *flag.Flag) {
		if !hidden[f.Name] {
			shown.Var(f.Value, f.Name, f.Usage)
			shown.Lookup(f.Name).DefValue = f.DefValue
		}
	})
	shown.SetOutput(out)
	fmt.Fprintln(out, "Usage: nodehub [flags]")
	shown.PrintDefaults()
}

// validate checks the flags and fills the defaults that follow from others; the first wrong
// flag is the error, one line naming it.
func (o *options) validate() error {
	for _, check := range []func() error{
		o.validateNode,
		o.validateListeners,
		o.validateHeartbeat,
		o.validateCache,
		o.validateMode,
		o.validateLink,
		o.validateParts,
		o.validateBounds,
		o.validateBootstrap,
		o.validatePool,
	} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// validateNode checks the node's name (the host's by default) and its cloud: the servers and
// how requests are balanced over them.
func (o *options) validateNode() error {
	if o.nodeName == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("--node-name: not set and the host name is unknown: %v", err)
		}
		o.nodeName = strings.ToLower(h)
	}
	if strings.ContainsAny(o.nodeName, "/ ") {
		return fmt.Errorf("--node-name: %q is not a valid node name", o.nodeName)
	}
	if len(o.servers()) == 0 {
		return errors.New("--server-addr: required (the cloud kube-apiserver addresses)")
	}
	for _, s := range o.servers() {
		if _, err := hub.ParseServerAddr(s); err != nil {
			return fmt.Errorf("--server-addr: %v", err)
		}
	}
	if o.lbMode != hub.RoundRobin && o.lbMode != hub.Priority {
		return fmt.Errorf("--lb-mode: %q is not rr or priority", o.lbMode)
	}
	return nil
}

// validateListeners checks where the hub listens: its ports and addresses (the plain-HTTP proxy
// port on loopback only, unless insisted).
func (o *options) validateListeners() error {
	for _, p := range []struct {
		name string
		v    int
	}{{"serve-port", o.servePort}, {"proxy-port", o.proxyPort}} {
		if p.v < 1 || p.v > 65535 {
			return fmt.Errorf("--%s: %d is not a port (1-65535)", p.name, p.v)
		}
	}
	for _, a := range []struct{ name, v string }{{"bind-address", o.bindAddress}, {"bind-proxy-address", o.bindProxyAddress}} {
		if net.ParseIP(a.v) == nil {
			return fmt.Errorf("--%s: %q is not an IP address", a.name, a.v)
		}
	}
	if !net.ParseIP(o.bindProxyAddress).IsLoopback() && !o.allowRemoteProxy {
		return fmt.Errorf("--bind-proxy-address: %s is not a loopback address; the plain-HTTP proxy port must not be reachable from other hosts (--insecure-allow-remote-proxy to insist)", o.bindProxyAddress)
	}
	return nil
}

// validateHeartbeat checks the health checker's flags.
func (o *options) validateHeartbeat() error {
	for _, p := range []struct {
		name string
		v    int
	}{{"heartbeat-interval-seconds", o.hbInterval}, {"heartbeat-failed-retry", o.hbFailedRetry}, {"heartbeat-healthy-threshold", o.hbHealthy}, {"heartbeat-timeout-seconds", o.hbTimeout}} {
		if p.v < 1 {
			return fmt.Errorf("--%s: %d must be at least 1", p.name, p.v)
		}
	}
	return nil
}

// validateCache checks the cache's flags: its sync, its collection, whose reads it keeps.
func (o *options) validateCache() error {
	if o.cacheSync < 10*time.Millisecond {
		return fmt.Errorf("--cache-sync-interval: %v is below 10ms", o.cacheSync)
	}
	if o.gcFrequency < 1 {
		return fmt.Errorf("--gc-frequency: %d must be at least 1 (minutes)", o.gcFrequency)
	}
	for _, a := range append(splitList(o.cacheAgents), splitList(o.noCacheAgents)...) {
		if strings.ContainsAny(a, "/ ") {
			return fmt.Errorf("--cache-agents/--no-cache-agents: %q is not a component name", a)
		}
	}
	return nil
}

// validateMode checks the working mode and the hub's secure address for pods.
func (o *options) validateMode() error {
	switch o.workingMode {
	case "edge", "cloud":
	case "local":
		return errors.New("--working-mode: local is not supported: nodehub does not run YurtHub's local mode (a hub in front of a tenant cluster's apiservers, --host-control-plane-address); use edge or cloud")
	default:
		return fmt.Errorf("--working-mode: %q is not edge or cloud", o.workingMode)
	}
	if net.ParseIP(o.masterHost) == nil {
		return fmt.Errorf("--master-service-host: %q is not an IP address", o.masterHost)
	}
	if o.proxySecurePort < 0 || o.proxySecurePort > 65535 {
		return fmt.Errorf("--proxy-secure-port: %d is not a port (1-65535, or 0 for none)", o.proxySecurePort)
	}
	return nil
}

// validateLink checks the hub's link: its name and address (by default the node's family's).
func (o *options) validateLink() error {
	if err := dummyif.ValidateName(o.dummyIfName); err != nil {
		return fmt.Errorf("--dummy-if-name: %v", err)
	}
	if o.dummyIfIP == "" {
		o.dummyIfIP = dummyif.DefaultIPv4
		if o.ipv6Node() {
			o.dummyIfIP = dummyif.DefaultIPv6
		}
	}
	if err := dummyif.ValidateIP(net.ParseIP(o.dummyIfIP)); err != nil {
		return fmt.Errorf("--dummy-if-ip: %q: %v", o.dummyIfIP, err)
	}
	return nil
}

// validateParts checks what the hub's parts are given: OTA's static pod directory, the filters.
func (o *options) validateParts() error {
	if o.staticPodPath == "" {
		return errors.New("--static-pod-path: must not be empty")
	}
	if _, err := filter.New(o.filterConfig()); err != nil {
		return fmt.Errorf("--disabled-resource-filters/--filter-components: %v", err)
	}
	return nil
}

// validateBounds checks the bounds on the hub's work and memory, and kubelet's grace period.
func (o *options) validateBounds() error {
	if o.maxInFlight < 0 {
		return fmt.Errorf("--max-requests-in-flight: %d must not be negative", o.maxInFlight)
	}
	if o.memoryLimit != "" {
		q, err := resource.ParseQuantity(o.memoryLimit)
		if err != nil || q.Value() < 8<<20 {
			return fmt.Errorf("--memory-limit: %q is not a size of at least 8Mi", o.memoryLimit)
		}
	}
	if o.cacheMaxBytes != "" {
		if q, err := resource.ParseQuantity(o.cacheMaxBytes); err != nil || q.Value() <= 0 {
			return fmt.Errorf("--cache-max-bytes: %q is not a positive size", o.cacheMaxBytes)
		}
	}
	if o.maxProcs < 1 {
		return fmt.Errorf("--max-procs: %d must be at least 1", o.maxProcs)
	}
	if o.timerSlack < 0 || o.timerSlack > maxTimerSlack {
		return fmt.Errorf("--timer-slack: %v is not between 0 and %v", o.timerSlack, maxTimerSlack)
	}
	if o.kubeletGrace <= 0 {
		return fmt.Errorf("--kubelet-health-grace-period: %v must be positive", o.kubeletGrace)
	}
	return nil
}

// validateBootstrap checks how the node obtains its credentials.
func (o *options) validateBootstrap() error {
	switch o.bootstrapMode {
	case certs.ModeKubeletCertificate:
	case certs.ModeToken:
		if o.joinToken != "" {
			if _, _, err := certs.ParseToken(o.joinToken); err != nil {
				return fmt.Errorf("--join-token: %v", err)
			}
			if o.caHashes == "" && !o.skipCAVerify {
				return errors.New("--discovery-token-ca-cert-hash: required with --join-token (or --discovery-token-unsafe-skip-ca-verification)")
			}
		}
		for _, h := range strings.Split(o.caHashes, ",") {
			if strings.TrimSpace(h) == "" {
				continue
			}
			if _, err := certs.ParseCAHash(h); err != nil {
				return fmt.Errorf("--discovery-token-ca-cert-hash: %v", err)
			}
		}
		if o.bootstrapFile != "" {
			if _, err := os.Stat(o.bootstrapFile); err != nil {
				return fmt.Errorf("--bootstrap-file: %v", err)
			}
		}
	default:
		return fmt.Errorf("--bootstrap-mode: %q is not kubeletcertificate or token", o.bootstrapMode)
	}
	return nil
}

// validatePool checks the pool-sharing flags.
func (o *options) validatePool() error {
	if _, err := pool.ParseResources(o.poolResources); err != nil {
		return fmt.Errorf("--pool-scope-resources: %v", err)
	}
	if o.poolSelfDeclared && o.poolMode != pool.ModeLease {
		return fmt.Errorf("--pool-self-declared-membership: only with --pool-mode=lease")
	}
	switch o.poolMode {
	case pool.ModeOff:
		return nil
	case pool.ModeLease, pool.ModeNodePool:
	default:
		return fmt.Errorf("--pool-mode: %q is not off, lease or nodepool", o.poolMode)
	}
	if o.nodePoolName == "" {
		return fmt.Errorf("--pool-mode: %s needs --nodepool-name", o.poolMode)
	}
	if o.poolResources == "" {
		return fmt.Errorf("--pool-mode: %s needs --pool-scope-resources", o.poolMode)
	}
	ip := net.ParseIP(o.poolBindAddress)
	switch {
	case o.poolBindAddress == "" && o.poolMode == pool.ModeNodePool:
	case ip == nil:
		return fmt.Errorf("--pool-bind-address: %q is not an IP address (with --pool-mode=%s it is required: the address the pool's other hubs reach this one at)", o.poolBindAddress, o.poolMode)
	case ip.IsUnspecified() && o.poolMode == pool.ModeLease:
		return fmt.Errorf("--pool-bind-address: %s cannot be advertised to the pool; give this node's address", o.poolBindAddress)
	}
	if o.poolPort < 1 || o.poolPort > 65535 {
		return fmt.Errorf("--pool-port: %d is not a port (1-65535)", o.poolPort)
	}
	if o.poolLeaderTimeout < 500*time.Millisecond {
		return fmt.Errorf("--pool-leader-timeout: %v is below 500ms", o.poolLeaderTimeout)
	}
	if strings.ContainsAny(o.poolLeaseNS, "/ ") || o.poolLeaseNS == "" {
		return fmt.Errorf("--pool-lease-namespace: %q is not a namespace", o.poolLeaseNS)
	}
	return nil
}

// identity is what the bootstrap flags say about the node's credentials.
func (o *options) identity() hub.NodeIdentity {
	return hub.NodeIdentity{Mode: o.bootstrapMode, Servers: o.servers(), NodeName: o.nodeName, PKIDir: o.pkiDir(),
		JoinToken: o.joinToken, CAHashes: o.caPins(), SkipCAVerification: o.skipCAVerify, BootstrapFile: o.bootstrapFile,
		Organizations: splitList(o.hubCertOrgs), KubeletKubeconfig: o.kubeletKubeconfig,
		ClientCert: o.clientCert, ClientKey: o.clientKey, CAFile: o.caFile}
}

// pkiDir is where the hub keeps its certificates.
func (o *options) pkiDir() string { return strings.TrimSuffix(o.rootDir, "/") + "/pki" }

// caPins are the --discovery-token-ca-cert-hash values, validated.
func (o *options) caPins() []string {
	var out []string
	for _, h := range strings.Split(o.caHashes, ",") {
		if v, err := certs.ParseCAHash(h); err == nil {
			out = append(out, v)
		}
	}
	return out
}

// poolConfig is what the pool flags say.
func (o *options) poolConfig() hub.PoolConfig {
	res, _ := pool.ParseResources(o.poolResources)
	addr := o.poolBindAddress
	if addr == "" {
		addr = "0.0.0.0"
	}
	return hub.PoolConfig{Resources: res, Mode: o.poolMode, LeaseNamespace: o.poolLeaseNS,
		Addr: hostPort(addr, o.poolPort), LeaderTimeout: o.poolLeaderTimeout, SelfDeclared: o.poolSelfDeclared}
}

func (o *options) servers() []string { return splitList(o.serverAddr) }

// ipv6Node says whether the node talks IPv6: its proxy binds an IPv6 address, or every cloud
// server is an IPv6 literal. It picks --dummy-if-ip's default.
func (o *options) ipv6Node() bool {
	if ip := net.ParseIP(o.bindProxyAddress); ip != nil && ip.To4() == nil {
		return true
	}
	servers := o.servers()
	for _, s := range servers {
		u, err := hub.ParseServerAddr(s)
		if err != nil {
			return false
		}
		if ip := net.ParseIP(u.Hostname()); ip == nil || ip.To4() != nil {
			return false
		}
	}
	return len(servers) > 0
}

// cachePolicy is what --cache-agents and --no-cache-agents say.
func (o *options) cachePolicy() cache.Policy {
	return cache.Policy{Agents: splitList(o.cacheAgents), Excluded: splitList(o.noCacheAgents)}
}

// memoryLimitBytes is --memory-limit in bytes (0 when unset).
func (o *options) memoryLimitBytes() int64 { return bytesOf(o.memoryLimit) }

// bytesOf reads a size flag already validated (0 when unset).
func bytesOf(v string) int64 {
	if v == "" {
		return 0
	}
	q, _ := resource.ParseQuantity(v)
	return q.Value()
}

// filterConfig is what the filter flags say.
func (o *options) filterConfig() filter.Config {
	return filter.Config{Enabled: o.filterEnabled, Disabled: splitList(o.filterDisabled), Components: o.filterComponents.m,
		WorkingMode: o.workingMode, MasterServiceHost: o.masterHost, MasterServicePort: o.proxySecurePort,
		NodeName: o.nodeName, NodePool: o.nodePoolName}
}

// componentsFlag collects --filter-components name=comp1,comp2.
type componentsFlag struct{ m map[string][]string }

func (c *componentsFlag) String() string { return "" }
func (c *componentsFlag) Set(v string) error {
	name, comps, ok := strings.Cut(v, "=")
	if !ok || strings.TrimSpace(name) == "" || len(splitList(comps)) == 0 {
		return fmt.Errorf("want name=comp1,comp2, got %q", v)
	}
	if c.m == nil {
		c.m = map[string][]string{}
	}
	name = strings.TrimSpace(name)
	c.m[name] = append(c.m[name], splitList(comps)...)
	return nil
}

// splitList reads a comma-separated flag value, lower-cased, without empty entries.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.ToLower(strings.TrimSpace(s)); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }
