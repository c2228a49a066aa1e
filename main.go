// Command nodehub is a node-side proxy between a Kubernetes node's clients and the cloud
// kube-apiservers, a drop-in for OpenYurt's YurtHub. main reads flags, wires the parts and
// handles signals; the work is done in hub/.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	"nodehub/hub"
	"nodehub/hub/certs"
)

// Set by the Makefile with -ldflags -X.
var (
	version = "dev"
	commit  = "unknown"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

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
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(min(o.maxProcs, runtime.NumCPU()))
	}
	if n := o.memoryLimitBytes(); n > 0 {
		debug.SetMemoryLimit(n)
	}
	level := slog.LevelInfo
	if o.verbosity >= 4 {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	for _, name := range o.ignored {
		log.Warn("flag accepted for YurtHub compatibility but not implemented yet; ignored", "flag", "--"+name)
	}

	creds := certs.NewSource(certs.KubeletFiles(o.kubeletKubeconfig, o.clientCert, o.clientKey, o.caFile))
	if err := creds.Err(); err != nil {
		log.Warn("node credentials not loaded yet; retrying in the background", "err", err)
	}
	srv, err := hub.New(hub.Config{
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
		Credentials:        creds,
		Profiling:          o.profiling,
		Log:                log,
		CacheDir:           o.diskCachePath,
		CachePolicy:        o.cachePolicy(),
		CacheSyncInterval:  o.cacheSync,
		GCFrequency:        time.Duration(o.gcFrequency) * time.Minute,
		Filters:            o.filterConfig(),
		MaxInFlight:        o.maxInFlight,
		CacheMaxBytes:      bytesOf(o.cacheMaxBytes),
		Pool:               o.poolConfig(),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodehub:", err)
		return 1
	}

	// The first SIGTERM or SIGINT stops gracefully (in-flight requests end, the cache is flushed and
	// synced, within 10 s); a second one exits at once.
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
	log.Info("nodehub starting", "version", version, "node", o.nodeName, "servers", o.serverAddr, "lb", o.lbMode)
	if err := srv.Run(ctx); err != nil {
		log.Error("nodehub stopped", "err", err)
		return 1
	}
	log.Info("nodehub stopped")
	return 0
}
