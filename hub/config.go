package hub

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"time"

	"nodehub/pool"
	"nodehub/wire"
)

// The defaults of Config's zero values. They are YurtHub's defaults (which main's flags also
// have), except the addresses: an empty ProxyAddr or HubAddr is a free loopback port (see
// Server.Addrs), so a Config built in a test never takes a port another hub uses.
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
	DefaultPoolLeaderTimeout  = 5 * time.Second
	defaultAddr               = "127.0.0.1:0"
)

// setDefaults gives every zero field of c its working value: the one place Config's defaults are
// applied (New calls it first). Fields whose zero is documented as "none" or "off" keep it.
func (c *Config) setDefaults() {
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
// whether they are loaded (certs.Source, certs.Manager; StartCredentials returns one).
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
