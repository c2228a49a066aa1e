// Command bench measures nodehub against a real control plane and prints its figures: binary
// sizes; RSS idle and under load; GET node / LIST pods latency through the hub versus directly,
// interleaved in one run so both see the same machine; the hub's CPU per request; and the cache's
// cost in flash writes, syncs and memory.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"nodehub/e2e/harness"
)

type options struct {
	rounds, pods, objects, services int
	poolServices, kubeletPods       int
	kubeletReleases                 string
	churn, profile, poolChurn       time.Duration
	profile100, idle                time.Duration
	profileSharing                  bool
	profileInitialEvents            bool
	limits                          string
	sizes                           bool
	cpuprofile                      string
	cpuprofileSeconds               int
	only                            string
	cloudSizes, cloudModes          string
	cloudIdle, cloudCut             time.Duration
	cloudServices                   int
	flannelRestarts                 int
	kubeProxyWrites                 int
}

func main() {
	runFloorProxyIfAsked()
	var o options
	flag.IntVar(&o.rounds, "rounds", 1500, "requests of each kind through the hub and directly")
	flag.IntVar(&o.pods, "pods", 110, "pods on the node")
	flag.IntVar(&o.objects, "objects", 10000, "objects cached for the cache memory figure")
	flag.DurationVar(&o.churn, "churn", 10*time.Second, "how long the 100 events/s churn runs")
	flag.IntVar(&o.services, "services", 1000, "services (each with a 10-endpoint EndpointSlice) in the node profile")
	flag.DurationVar(&o.profile, "profile", time.Minute, "how long the node profile's 10 updates/s run")
	flag.BoolVar(&o.profileInitialEvents, "profile-initial-events", false, "the node profile's clients watch from resourceVersion \"\" (every object again as an ADDED event) instead of from their list's")
	flag.BoolVar(&o.profileSharing, "profile-sharing", true, "the node profile's hub shares pool-scope resources (default); false: every client watches the cloud")
	flag.DurationVar(&o.idle, "idle", idleAfter, "how long a hub runs before its idle RSS is read (also read at half of it)")
	flag.DurationVar(&o.profile100, "profile-100", 30*time.Second, "how long the node profile's 100 updates/s run")
	flag.StringVar(&o.limits, "profile-memory-limits", "16Mi,24Mi", "--memory-limit values the node profile's initial lists are run again with")
	flag.IntVar(&o.poolServices, "pool-services", 200, "services (each with a 10-endpoint EndpointSlice) in the pool benchmark")
	flag.DurationVar(&o.poolChurn, "pool-churn", 30*time.Second, "how long the pool benchmark's 10 slice updates/s run, per mode")
	flag.BoolVar(&o.sizes, "sizes", true, "build for every architecture and print binary sizes")
	flag.StringVar(&o.cpuprofile, "hub-cpuprofile", "", "write a CPU profile of the hub during the latency rounds to this file (GET node; LIST pods to the same name with .list before its extension)")
	flag.IntVar(&o.cpuprofileSeconds, "hub-cpuprofile-seconds", 6, "how long each -hub-cpuprofile lasts, from the start of its rounds (3,000 GETs of the node take about 6 s)")
	flag.IntVar(&o.kubeletPods, "kubelet-pods", 110, "pods of the hollow kubelet in the kubelet section")
	flag.StringVar(&o.kubeletReleases, "kubelet-releases", "v1.34,v1.37", "the Kubernetes releases (control plane, kubelet, kube-proxy) the kubelet section runs, side by side")
	flag.StringVar(&o.only, "only", "", "run one section: idle (not in the full run: latency and profile print idle figures), latency, secure, offline, health, cache, profile, pool, tokens, hostile, brokencloud, endpoints, kubelet, restart, cloud, coldstart, flannel or kubeproxy")
	flag.StringVar(&o.cloudSizes, "cloud-sizes", "10,30", "the cloud section's pool sizes (hubs)")
	flag.StringVar(&o.cloudModes, "cloud-modes", "node,lease,unsigned", "the cloud section's sharing modes (unsigned: lease mode with no serving certificate signed; node-unsigned: node level with none signed)")
	flag.DurationVar(&o.cloudIdle, "cloud-idle", 5*time.Minute, "how long the cloud section measures idle uplink (a per-day figure: long enough that one-off costs of a hub's first minutes weigh little)")
	flag.DurationVar(&o.cloudCut, "cloud-cut", 100*time.Second, "how long the cloud section black-holes the link (past the apiserver's ~75 s watch history)")
	flag.IntVar(&o.cloudServices, "cloud-services", 500, "services (each with a 10-endpoint EndpointSlice) in the cloud section")
	flag.IntVar(&o.kubeProxyWrites, "kubeproxy-writes", 20, "timed offline status writes of each kube-proxy mode and release in the kubeproxy section")
	flag.IntVar(&o.flannelRestarts, "flannel-restarts", 5, "offline restarts of flannel of each kind in the flannel section")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// env is what every section shares: the control plane and the nodehub binary.
type env struct {
	ctx context.Context
	dir string
	bin string
	c   *harness.Cluster
	n   int
	gen int // the pool benchmark's update counter
}

// hubDir makes a fresh directory for one hub of a section.
func (e *env) hubDir() (string, error) {
	e.n++
	dir := filepath.Join(e.dir, fmt.Sprintf("hub-%d", e.n))
	return dir, os.MkdirAll(dir, 0o755)
}

// relay puts a relay in front of the first apiserver (to black-hole or refuse the link) and makes
// a fresh hub directory; the caller closes the relay.
func (e *env) relay() (*harness.Relay, string, error) {
	relay, err := harness.NewRelay(strings.TrimPrefix(e.c.APIServers[0].URL, "https://"))
	if err != nil {
		return nil, "", err
	}
	dir, err := e.hubDir()
	if err != nil {
		relay.Close()
		return nil, "", err
	}
	return relay, dir, nil
}

// startHub starts a hub of its own for one section.
func (e *env) startHub(args ...string) (*harness.Hub, error) {
	return e.startHubBin(e.bin, args...)
}

// startHubBin starts a hub of its own from another build of nodehub (HUB_ARGS: more flags; HUB_ENV:
// its environment).
func (e *env) startHubBin(bin string, args ...string) (*harness.Hub, error) {
	dir, err := e.hubDir()
	if err != nil {
		return nil, err
	}
	h, err := e.c.StartHub(e.ctx, harness.HubOptions{Bin: bin, Dir: dir,
		Args: append(append([]string{"--v=2", "--heartbeat-interval-seconds=10"}, args...), strings.Fields(os.Getenv("HUB_ARGS"))...), Env: strings.Fields(os.Getenv("HUB_ENV"))})
	if err != nil {
		return nil, err
	}
	if err := h.WaitHTTP(e.ctx, "/v1/readyz", 20*time.Second); err != nil {
		h.Stop()
		return nil, err
	}
	return h, nil
}

func run(o options) error {
	dir, err := os.MkdirTemp("", "nodehub-bench-")
	if err != nil {
		return err
	}
	if os.Getenv("NODEHUB_BENCH_KEEP") == "" { // set: the hubs' directories and logs are kept
		defer os.RemoveAll(dir)
	} else {
		fmt.Fprintln(os.Stderr, "bench: keeping", dir)
	}
	if o.only == "flannel" { // the e2e test's two nodes and control plane, not this one
		return benchFlannel(o.flannelRestarts)
	}
	if o.only == "kubeproxy" { // the e2e test's node namespace and control planes, not this one
		return benchKubeProxy(o.kubeProxyWrites)
	}
	e := &env{ctx: context.Background(), dir: dir}
	if o.sizes && o.only == "" {
		if err := printSizes(dir); err != nil {
			return err
		}
	}
	if e.bin, err = harness.BuildNodehub(dir); err != nil {
		return err
	}
	if e.c, err = harness.StartCluster(e.ctx, dir, 1); err != nil {
		return err
	}
	defer e.c.Stop()
	if o.only == "idle" {
		if err := benchIdle(e, o); err != nil {
			return err
		}
	}
	if o.only == "" || o.only == "latency" {
		if err := benchLatency(e, o); err != nil {
			return err
		}
	}
	if o.only == "" || o.only == "secure" {
		if err := benchSecure(e, o); err != nil {
			return err
		}
	}
	if o.only == "" || o.only == "offline" {
		if o.only != "" {
			if err := makePods(e.ctx, e.c, o.pods); err != nil {
				return err
			}
		}
		if err := benchOffline(e, o); err != nil {
			return err
		}
	}
	if o.only == "" || o.only == "health" {
		if o.only != "" {
			if err := makePods(e.ctx, e.c, o.pods); err != nil {
				return err
			}
		}
		if err := benchHealth(e, o); err != nil {
			return err
		}
	}
	if o.only == "" || o.only == "cache" {
		if err := benchCache(e, o); err != nil {
			return err
		}
	}
	if o.only == "" || o.only == "profile" {
		if o.only != "" {
			if err := makePods(e.ctx, e.c, o.pods); err != nil {
				return err
			}
		}
		if err := benchProfile(e, o); err != nil {
			return err
		}
	}
	if o.only == "" || o.only == "coldstart" {
		if o.only != "" {
			if err := makePods(e.ctx, e.c, o.pods); err != nil {
				return err
			}
		}
		if err := benchColdStart(e, o); err != nil {
			return err
		}
	}
	if o.only == "" || o.only == "pool" {
		if err := benchPool(e, o); err != nil {
			return err
		}
	}
	if o.only == "" || o.only == "tokens" {
		if err := benchTokens(e, o); err != nil {
			return err
		}
	}
	if o.only == "" || o.only == "hostile" {
		if err := benchHostile(e, o); err != nil {
			return err
		}
	}
	if o.only == "" || o.only == "brokencloud" {
		if err := benchBrokenCloud(e, o); err != nil {
			return err
		}
	}
	if o.only == "" || o.only == "endpoints" {
		if err := benchEndpoints(e, o); err != nil {
			return err
		}
	}
	if o.only == "" || o.only == "kubelet" {
		if err := benchKubelet(e, o); err != nil {
			return err
		}
	}
	if o.only == "" || o.only == "restart" {
		if err := benchRestart(e, o); err != nil {
			return err
		}
	}
	if o.only == "" || o.only == "cloud" {
		if err := benchCloud(e, o); err != nil {
			return err
		}
	}
	if o.only == "" {
		if err := benchFlannel(o.flannelRestarts); err != nil {
			return err
		}
		return benchKubeProxy(o.kubeProxyWrites)
	}
	return nil
}
