package hub

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"nodehub/cache"
	"nodehub/filter"
	"nodehub/hub/endpointfix"
	"nodehub/hub/serve"
	"nodehub/pool"
	"nodehub/wire"
)

// Config is everything the hub needs, filled from flags by main. Its zero value works once
// Servers is set: every zero field either means "none"/"off" as its comment says or gets the
// default setDefaults (config.go) gives it, which are YurtHub's defaults.
type Config struct {
	// NodeName is this node's name (default: the host name, lower-cased).
	NodeName string
	// EndpointsReturnBound is how long after the cloud's return the node's endpoints may still be
	// served as kubelet reported them offline, while the cloud catches up (default 2 minutes;
	// hub/endpointfix).
	EndpointsReturnBound time.Duration
	// NodePoolName is this node's pool ("" none): the servicetopology filter and pool sharing use it.
	NodePoolName string
	// Servers are the cloud kube-apiservers, "https://host:port" or "host:port" (required).
	Servers []string
	// LBMode is RoundRobin (default) or Priority: how requests spread over healthy servers.
	LBMode string

	// ProxyAddr is host:port of the plain-HTTP proxy port; HubAddr of the hub's own endpoints
	// (default for each: a free port on 127.0.0.1; Addrs says which).
	ProxyAddr, HubAddr string

	// Started, if set, is called once when the start-up burst is over: the shared stores hold
	// their first lists (or two minutes have passed). main lifts its start-up memory limit then.
	Started func()
	// HeartbeatInterval is the time between two heartbeats (node lease renewals) to each server
	// (default 10s).
	HeartbeatInterval time.Duration
	// HeartbeatTimeout bounds one heartbeat and one connect (default 2s).
	HeartbeatTimeout time.Duration
	// HeartbeatFailed failures make a server unhealthy (default 3).
	HeartbeatFailed int
	// HeartbeatHealthy successes make it healthy again (default 2).
	HeartbeatHealthy int
	// KubeletGracePeriod: the hub stops renewing the node lease when kubelet sent no lease request
	// for this long (default 40s).
	KubeletGracePeriod time.Duration

	// Credentials are the node's identity towards the cloud (default none: no client certificate
	// is presented and the system's CA roots verify the servers).
	Credentials Credentials
	// SecureAddrs are host:port the HTTPS proxy port for pods listens on (first one required to
	// exist on the host; others, like the dummy interface's address, are bound when they appear).
	// Requests there must carry a bearer token, forwarded as is. Empty: no secure port.
	SecureAddrs []string
	// ServingCert is the hub's serving certificate hook (ServingCertificate), which the secure
	// port and the pool port serve; required with either.
	ServingCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// SetToken replaces the join token (POST /v1/token); nil when not bootstrapping by token (the
	// endpoint then answers that it is not available).
	SetToken func(string) error
	// Parts are parts main built that run with the hub's own (NodeCredentials' renewal,
	// ServingCertificate's): each until the hub stops; an error of one stops the hub.
	Parts []Part
	// Profiling serves /debug/pprof/ on the hub port.
	Profiling bool
	// RemoteMetrics serves /metrics to any address the hub port is reached at; by default the
	// hub API answers only loopback (health and readiness excepted).
	RemoteMetrics bool
	// Log receives the hub's logs (default slog.Default()).
	Log *slog.Logger

	// RootDir is --root-dir: the hub's own files (which tokens belong to which ServiceAccount);
	// "": kept in memory only.
	RootDir string
	// CacheDir is the local cache directory; "" disables caching (and the offline proxy).
	CacheDir string
	// CachePolicy says which components' reads are cached (zero: only the hub's own).
	CachePolicy cache.Policy
	// CacheSyncInterval is how often cache writes are made durable, one fdatasync per changed log
	// per interval (default 1s).
	CacheSyncInterval time.Duration
	// GCFrequency is how often the cache is collected; cached events older than it are removed
	// (default 120 minutes).
	GCFrequency time.Duration
	// Filters configures the response filters (zero: filtering off).
	Filters filter.Config
	// CacheMaxBytes stops the caching of new objects past that size (0: no limit).
	CacheMaxBytes int64
	// MaxInFlight bounds the proxied requests served at once (watches and exec, attach and
	// port-forward upgrades not counted); beyond it clients get 429 with Retry-After. The node's
	// own clients (over loopback, without a credential of their own) and everyone else each have
	// a budget of MaxInFlight, so pods cannot starve kubelet. 0: no bound.
	MaxInFlight int
	// BodyTimeout bounds the time a client takes to send a request body on the proxy ports
	// (default DefaultBodyTimeout); past it the answer is 408.
	BodyTimeout time.Duration
	// DummyIf is the hub's address on the node (--enable-dummy-if and friends; zero: none).
	DummyIf DummyIf
	// StaticPodPath is kubelet's manifest directory, where an OTA upgrade of a static pod writes
	// ("": static pods cannot be upgraded).
	StaticPodPath string
	// Pool configures pool sharing (list/watch of pool-scope resources from shared stores; zero:
	// off).
	Pool PoolConfig
}

// DummyIf is the hub's own address on the node: a link (Name) holding IP, kept in place by the
// hub, on which the proxy ports listen too (pods reach the hub there). Zero: none.
type DummyIf struct {
	Enabled bool
	Name    string
	IP      net.IP
	// Cleanup removes the link when the hub stops (YurtHub keeps it by default).
	Cleanup bool
}

// ExtraHosts are the addresses, besides the configured bind addresses, the proxy ports listen on:
// the dummy link's IP when enabled. Requests arriving there never get the node's identity (see
// the pipeline's accept step); the secure port listens on them too, unless it is bound to 0.0.0.0 or ::.
func (c Config) ExtraHosts() []string {
	if c.DummyIf.Enabled && c.DummyIf.IP != nil {
		return []string{c.DummyIf.IP.String()}
	}
	return nil
}

// The defaults of Config's zero values, the one place they are written: YurtHub's defaults,
// which main's flags take from here (design_test.go checks it), except the addresses: an empty
// ProxyAddr or HubAddr is a free loopback port (see Server.Addrs), so a Config built in a test
// never takes a port another hub uses.
const (
	DefaultLBMode             = RoundRobin
	DefaultHeartbeatInterval  = 10 * time.Second
	DefaultHeartbeatTimeout   = 2 * time.Second
	DefaultHeartbeatFailed    = 3
	DefaultHeartbeatHealthy   = 2
	DefaultKubeletGracePeriod = 40 * time.Second
	DefaultCacheSyncInterval  = time.Second
	DefaultGCFrequency        = 120 * time.Minute
	DefaultPoolLeaseNamespace = "kube-node-lease"
	DefaultPoolLeaderTimeout  = pool.DefaultLeaderTimeout
	// DefaultBodyTimeout bounds the time a client takes to send a request body on the proxy ports
	// (Config.BodyTimeout): a body that trickles in does not hold an in-flight slot for longer.
	DefaultBodyTimeout = serve.DefaultBodyTimeout
	// DefaultEndpointsReturnBound is Config.EndpointsReturnBound's (hub/endpointfix's).
	DefaultEndpointsReturnBound = endpointfix.DefaultBound
	defaultAddr                 = "127.0.0.1:0"
)

// setDefaults gives every zero field of c its working value: the one place Config's defaults are
// applied (New calls it first). Fields whose zero is documented as "none" or "off" keep it.
func (c *Config) setDefaults() {
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.EndpointsReturnBound <= 0 {
		c.EndpointsReturnBound = DefaultEndpointsReturnBound
	}
	if c.BodyTimeout <= 0 {
		c.BodyTimeout = DefaultBodyTimeout
	}
	if c.NodeName == "" {
		if h, err := os.Hostname(); err == nil {
			c.NodeName = strings.ToLower(h)
		}
	}
	if c.LBMode == "" {
		c.LBMode = DefaultLBMode
	}
	if c.ProxyAddr == "" {
		c.ProxyAddr = defaultAddr
	}
	if c.HubAddr == "" {
		c.HubAddr = defaultAddr
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.HeartbeatTimeout <= 0 {
		c.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if c.HeartbeatFailed <= 0 {
		c.HeartbeatFailed = DefaultHeartbeatFailed
	}
	if c.HeartbeatHealthy <= 0 {
		c.HeartbeatHealthy = DefaultHeartbeatHealthy
	}
	if c.KubeletGracePeriod <= 0 {
		c.KubeletGracePeriod = DefaultKubeletGracePeriod
	}
	if c.Credentials == nil {
		c.Credentials = noCredentials{}
	}
	if c.CacheSyncInterval <= 0 {
		c.CacheSyncInterval = DefaultCacheSyncInterval
	}
	if c.GCFrequency <= 0 {
		c.GCFrequency = DefaultGCFrequency
	}
	if c.Pool.Mode == "" {
		c.Pool.Mode = pool.ModeOff
	}
	if c.Pool.LeaseNamespace == "" {
		c.Pool.LeaseNamespace = DefaultPoolLeaseNamespace
	}
	if c.Pool.LeaderTimeout <= 0 {
		c.Pool.LeaderTimeout = DefaultPoolLeaderTimeout
	}
}

// check reports what no default can mend.
func (c *Config) check() error {
	if len(c.Servers) == 0 {
		return errors.New("hub: no cloud server")
	}
	if len(c.SecureAddrs) > 0 && c.ServingCert == nil {
		return errors.New("hub: SecureAddrs without ServingCert")
	}
	if c.Pool.Mode != pool.ModeOff && len(c.Pool.Resources) > 0 && c.ServingCert == nil {
		return errors.New("hub: pool mode " + c.Pool.Mode + " without ServingCert (the pool port serves it)")
	}
	return nil
}

// Credentials are the node's credentials (Config.Credentials): what the backends present, and
// whether they are loaded (certs.Source, certs.Manager; NodeCredentials returns one).
type Credentials interface {
	wire.Credentials
	Err() error
}

// noCredentials are a hub's credentials when it has none of its own (Config.Credentials nil): no
// client certificate is presented and the system's CA roots verify the servers.
type noCredentials struct{}

func (noCredentials) CAPool() *x509.CertPool {
	if pool, err := x509.SystemCertPool(); err == nil {
		return pool
	}
	return x509.NewCertPool()
}
func (noCredentials) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return &tls.Certificate{}, nil
}
func (noCredentials) Err() error { return nil }
