// Package dummyif keeps the hub's address on the node: a link named hub-dummy0 (by default) holding
// 169.254.2.1 (or fd00::2:1 on an IPv6 node), the address the filters give pods for the
// `default/kubernetes` service. The link is made with raw rtnetlink messages (RTM_NEWLINK of kind
// "dummy", RTM_NEWADDR, link up); no `ip` binary and no netlink library.
//
// Ensure is idempotent: what exists is left as is, what is missing is added. Run ensures at start
// and every Interval, so a link someone removed comes back. Without CAP_NET_ADMIN the kernel says
// EPERM: that is logged once, Err reports it (for /v1/readyz) and the hub keeps proxying.
//
// A kernel built without the dummy driver (CONFIG_DUMMY off: minimal gateway and micro-VM kernels)
// answers EOPNOTSUPP; the link is then made as a bridge without ports, which holds a local address
// exactly like a dummy link does.
package dummyif

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Defaults, as YurtHub has them.
const (
	DefaultName = "hub-dummy0"
	DefaultIPv4 = "169.254.2.1"
	DefaultIPv6 = "fd00::2:1"
	// DefaultInterval is how often Run re-ensures the link.
	DefaultInterval = 60 * time.Second
)

// ErrUnsupported is returned on systems without rtnetlink.
var ErrUnsupported = errors.New("dummyif: not supported on this system")

// Link is the hub's link and address. Zero Interval means DefaultInterval; nil Log, slog.Default.
type Link struct {
	Name     string
	IP       net.IP
	Interval time.Duration
	Log      *slog.Logger
	// OnEnsure, when set, is called after every ensure with its result (for a metric).
	OnEnsure func(err error)

	mu      sync.Mutex
	lastErr error
	ran     bool
	kind    string // the kind this process created the link as ("" when it found it)
}

// ValidateIP checks a --dummy-if-ip value as YurtHub does: an IPv4 address inside 169.254.0.0/16
// but not in 169.254.31.0/24 and not 169.254.1.1, or an IPv6 address.
func ValidateIP(ip net.IP) error {
	if ip == nil {
		return errors.New("not an IP address")
	}
	if v4 := ip.To4(); v4 != nil {
		switch {
		case v4[0] != 169 || v4[1] != 254:
			return fmt.Errorf("%s is not in 169.254.0.0/16", ip)
		case v4[2] == 31:
			return fmt.Errorf("%s is in 169.254.31.0/24, which is reserved", ip)
		case v4[2] == 1 && v4[3] == 1:
			return fmt.Errorf("%s is reserved", ip)
		}
		return nil
	}
	if ip.IsLoopback() || ip.IsUnspecified() || ip.IsMulticast() {
		return fmt.Errorf("%s is not a unicast address", ip)
	}
	return nil
}

// ValidateName checks a link name: 1 to 15 bytes, no '/', no white space.
func ValidateName(name string) error {
	if name == "" || len(name) > 15 {
		return fmt.Errorf("%q must be 1 to 15 characters", name)
	}
	for _, c := range name {
		if c == '/' || c == ':' || c <= ' ' || c > '~' {
			return fmt.Errorf("%q is not a link name", name)
		}
	}
	return nil
}

// Err is the last ensure's error: nil when the link is in place (or no ensure ran yet).
func (l *Link) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastErr
}

// Run ensures the link now and every Interval until ctx ends.
func (l *Link) Run(ctx context.Context) {
	iv := l.Interval
	if iv <= 0 {
		iv = DefaultInterval
	}
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		l.ensureAndReport()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ensureAndReport ensures once and logs a change of outcome once (not every minute).
func (l *Link) ensureAndReport() {
	err := l.Ensure()
	if l.OnEnsure != nil {
		l.OnEnsure(err)
	}
	log := l.Log
	if log == nil {
		log = slog.Default()
	}
	l.mu.Lock()
	prev, first := l.lastErr, !l.ran
	l.lastErr, l.ran = err, true
	kind := l.kind
	l.mu.Unlock()
	switch {
	case err != nil && (first || prev == nil || prev.Error() != err.Error()):
		log.Warn("hub address not in place; proxying goes on without it", "link", l.Name, "ip", l.IP.String(), "err", err)
	case err == nil && (first || prev != nil):
		log.Info("hub address in place", "link", l.Name, "ip", l.IP.String(), "created", kind)
	}
}

// Ensure makes sure the link exists, holds IP and is up.
func (l *Link) Ensure() error {
	if err := ValidateName(l.Name); err != nil {
		return fmt.Errorf("dummyif: %w", err)
	}
	return l.ensure()
}

// describe turns the errno of one step into a message an operator can act on.
func describe(step, name string, err error) error {
	if isPermission(err) {
		return fmt.Errorf("dummyif: %s %s: %w (nodehub needs CAP_NET_ADMIN)", step, name, err)
	}
	return fmt.Errorf("dummyif: %s %s: %w", step, name, err)
}
