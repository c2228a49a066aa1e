// Command nodehub is a node-side proxy between a Kubernetes node's clients and the cloud
// kube-apiservers, a drop-in for OpenYurt's YurtHub. main reads flags, wires the parts and
// handles signals; the work is done in hub/.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"nodehub/hub"
	"nodehub/pool"
)

// Set by the Makefile with -ldflags -X.
var (
	version = "dev"
	commit  = "unknown"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// startMemoryLimit is the Go runtime's soft memory limit during start-up when --memory-limit is
// not set: the runtime's own memory (heap, stacks, metadata; not the binary's pages). The node
// profile's hub holds ~9 MiB of it once its stores hold their 2,000 objects.
const startMemoryLimit = 14 << 20

// run is nodehub: the flags read, the Go runtime tuned, the hub configured from them and run
// until a signal stops it; it returns the exit code.
func run(args []string) int {
	o, err := parseFlags(args, os.Stdout)
	if errors.Is(err, errHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodehub:", err)
		return 2
	}
	if o.version {
		fmt.Printf("nodehub %s commit %s %s %s/%s\n", version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return 0
	}
	started := o.tuneRuntime()
	log := o.logger()
	srv, err := hub.New(o.hubConfig(log, started))
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodehub:", err)
		return 1
	}
	return o.serve(srv, log)
}

// tuneRuntime sets the threads' timer slack (timerslack.go: the binary is executed again when it
// must change), the Go runtime's cores, heap profiling and memory limit from the flags; it
// returns what lifts the start-up limit once the hub started (nil: there is none).
func (o *options) tuneRuntime() (started func()) {
	if err := slackTimers(o.timerSlack); err != nil {
		fmt.Fprintln(os.Stderr, "nodehub: --timer-slack not applied:", err)
	}
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(min(o.maxProcs, runtime.NumCPU()))
	}
	if !o.profiling {
		// No heap profile will be read: skip the sampling and its bucket table (1.4 MiB reserved).
		runtime.MemProfileRate = 0
	}
	if n := o.memoryLimitBytes(); n > 0 {
		debug.SetMemoryLimit(n)
		return nil
	}
	// Without --memory-limit, the start-up burst (the shared stores' first lists, cached)
	// runs under a soft limit: the GC collects at the limit rather than doubling the heap,
	// which is what made the start-up peak (measured 27 MiB RSS on the node profile, where
	// the steady state is ~17). Lifted once the stores hold their lists (hub.Config.Started).
	debug.SetMemoryLimit(startMemoryLimit)
	return func() { debug.SetMemoryLimit(math.MaxInt64) }
}

// logger is the hub's log at the flags' verbosity; it warns of the YurtHub flags ignored.
func (o *options) logger() *slog.Logger {
	level := slog.LevelInfo
	if o.verbosity >= 4 {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if len(o.ignored) > 0 {
		log.Warn("YurtHub flags accepted and ignored (docs/flags.md: YurtHub flags nodehub ignores)", "flags", strings.Join(o.ignored, ","))
	}
	return log
}

// hubConfig is the hub's configuration from the flags, with the node's credentials and the
// serving certificate (nodeParts).
func (o *options) hubConfig(log *slog.Logger, started func()) hub.Config {
	cfg := hub.Config{
		Started:            started,
		NodeName:           o.nodeName,
		NodePoolName:       o.nodePoolName,
		Servers:            o.servers(),
		LBMode:             o.lbMode,
		ProxyAddr:          hostPort(o.bindProxyAddress, o.proxyPort),
		HubAddr:            hostPort(o.bindAddress, o.servePort),
		HeartbeatInterval:  time.Duration(o.hbInterval) * time.Second,
		HeartbeatTimeout:   time.Duration(o.hbTimeout) * time.Second,
		HeartbeatFailed:    o.hbFailedRetry,
		HeartbeatHealthy:   o.hbHealthy,
		KubeletGracePeriod: o.kubeletGrace,
		Profiling:          o.profiling,
		RemoteMetrics:      o.remoteMetrics,
		Log:                log,
		RootDir:            o.rootDir,
		CacheDir:           o.diskCachePath,
		CachePolicy:        o.cachePolicy(),
		CacheSyncInterval:  o.cacheSync,
		GCFrequency:        time.Duration(o.gcFrequency) * time.Minute,
		Filters:            o.filterConfig(),
		MaxInFlight:        o.maxInFlight,
		CacheMaxBytes:      bytesOf(o.cacheMaxBytes),
		DummyIf:            hub.DummyIf{Enabled: o.dummyIfEnabled, Name: o.dummyIfName, IP: net.ParseIP(o.dummyIfIP), Cleanup: o.dummyIfCleanup},
		StaticPodPath:      o.staticPodPath,
		Pool:               o.poolConfig(),
	}
	o.nodeParts(&cfg, log)
	return cfg
}

// nodeParts adds the node's credentials to cfg: bootstrapped and renewed by nodehub (token
// mode), or kubelet's files; and the serving certificate, where the secure port or the pool
// port serves. Their renewals are parts the hub runs (a wrong CA pin stops it).
func (o *options) nodeParts(cfg *hub.Config, log *slog.Logger) {
	creds, setToken, credPart := hub.NodeCredentials(o.identity(), log)
	if credPart != nil {
		cfg.Parts = append(cfg.Parts, *credPart)
	}
	cfg.Credentials, cfg.SetToken = creds, setToken
	secureAddrs, ips := hub.SecureNames(o.bindProxyAddress, o.proxySecurePort, o.masterHost, cfg.DummyIf, o.poolMode, o.poolBindAddress)
	cfg.SecureAddrs = secureAddrs
	if len(secureAddrs) > 0 || o.poolMode != pool.ModeOff {
		var part hub.Part
		cfg.ServingCert, part = hub.ServingCertificate(o.servers(), o.nodeName, o.pkiDir(), ips, creds, log)
		cfg.Parts = append(cfg.Parts, part)
	}
}

// serve runs the hub until a signal stops it and returns the exit code. The first SIGTERM or
// SIGINT stops gracefully (in-flight requests end, the cache is flushed and synced, within
// 10 s); a second one exits at once.
func (o *options) serve(srv *hub.Server, log *slog.Logger) int {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		log.Info("stopping")
		stop()
		<-sigs
		log.Warn("second signal: exiting at once")
		os.Exit(1)
	}()
	go giveBackMemory(ctx, log)
	log.Info("nodehub starting", "version", version, "node", o.nodeName, "servers", o.serverAddr, "lb", o.lbMode)
	if err := srv.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "nodehub:", err)
		log.Error("nodehub stopped", "err", err)
		return 1
	}
	log.Info("nodehub stopped")
	return 0
}
