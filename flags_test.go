package main

import (
	"io"
	"os"
	"strings"
	"testing"
)

func TestParseFlagsDefaultsAndYurtHubManifest(t *testing.T) {
	// The arguments of a YurtHub static pod manifest.
	args := []string{
		"--v=2", "--bind-address=127.0.0.1", "--server-addr=https://10.0.0.1:6443,10.0.0.2:6443",
		"--node-name=edge-1", "--bootstrap-file=/var/lib/yurthub/bootstrap-hub.conf",
		"--working-mode=edge", "--namespace=kube-system", "--nodepool-name=pool-a",
		"--enable-dummy-if", "--hub-cert-organizations=system:nodes", "--lb-mode=priority",
		"--bootstrap-mode=kubeletcertificate",
	}
	o, err := parseFlags(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := o.servers(); len(got) != 2 || got[1] != "10.0.0.2:6443" {
		t.Fatalf("servers %v", got)
	}
	if o.proxyPort != 10261 || o.servePort != 10267 || o.hbInterval != 10 || o.hbFailedRetry != 3 || o.hbHealthy != 2 || o.hbTimeout != 2 || o.kubeletGrace.Seconds() != 40 {
		t.Fatalf("defaults: %+v", o)
	}
	if o.diskCachePath != "/etc/kubernetes/cache/" || o.rootDir != "/var/lib/nodehub" || o.lbMode != "priority" || o.nodePoolName != "pool-a" {
		t.Fatalf("values: %+v", o)
	}
	if !o.dummyIfEnabled || o.dummyIfName != "hub-dummy0" || o.dummyIfIP != "169.254.2.1" || o.dummyIfCleanup || o.staticPodPath != "/etc/kubernetes/manifests" {
		t.Fatalf("dummy-if/static-pod defaults: %+v", o)
	}
	want := "namespace"
	if got := strings.Join(o.ignored, " "); got != want {
		t.Fatalf("ignored flags %q, want %q", got, want)
	}
}

func TestParseFlagsErrorsAreOneLineNamingTheFlag(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--server-addr=a:1", "--bogus"}, "bogus"},
		{[]string{"--node-name=n"}, "--server-addr"},
		{[]string{"--server-addr=ftp://x:1"}, "--server-addr"},
		{[]string{"--server-addr=a:1", "--lb-mode=random"}, "--lb-mode"},
		{[]string{"--server-addr=a:1", "--proxy-port=70000"}, "--proxy-port"},
		{[]string{"--server-addr=a:1", "--heartbeat-interval-seconds=abc"}, "heartbeat-interval-seconds"},
		{[]string{"--server-addr=a:1", "--heartbeat-failed-retry=0"}, "--heartbeat-failed-retry"},
		{[]string{"--server-addr=a:1", "--bind-address=localhost"}, "--bind-address"},
		{[]string{"--server-addr=a:1", "--kubelet-health-grace-period=-1s"}, "--kubelet-health-grace-period"},
		{[]string{"--server-addr=a:1", "--bootstrap-mode=magic"}, "--bootstrap-mode"},
		{[]string{"--server-addr=a:1", "--join-token=abc"}, "--join-token"},
		{[]string{"--server-addr=a:1", "--join-token=abcdef.0123456789abcdef"}, "--discovery-token-ca-cert-hash"},
		{[]string{"--server-addr=a:1", "--join-token=abcdef.0123456789abcdef", "--discovery-token-ca-cert-hash=sha256:12"}, "--discovery-token-ca-cert-hash"},
		{[]string{"--server-addr=a:1", "--bootstrap-file=/nonexistent/bootstrap.conf"}, "--bootstrap-file"},
		{[]string{"--server-addr=a:1", "--bind-proxy-address=0.0.0.0"}, "--bind-proxy-address"},
		{[]string{"--server-addr=a:1", "extra"}, "extra"},
		{[]string{"--server-addr=a:1", "--disabled-resource-filters=nosuch"}, "--disabled-resource-filters"},
		{[]string{"--server-addr=a:1", "--filter-components=masterservice"}, "filter-components"},
		{[]string{"--server-addr=a:1", "--working-mode=sky"}, "--working-mode"},
		{[]string{"--server-addr=a:1", "--timer-slack=1s"}, "--timer-slack"},
		{[]string{"--server-addr=a:1", "--timer-slack=-1ms"}, "--timer-slack"},
		{[]string{"--server-addr=a:1", "--dummy-if-ip=10.0.0.1"}, "--dummy-if-ip"},
		{[]string{"--server-addr=a:1", "--dummy-if-ip=169.254.31.5"}, "--dummy-if-ip"},
		{[]string{"--server-addr=a:1", "--dummy-if-ip=169.254.1.1"}, "--dummy-if-ip"},
		{[]string{"--server-addr=a:1", "--dummy-if-ip=nope"}, "--dummy-if-ip"},
		{[]string{"--server-addr=a:1", "--dummy-if-name=a-name-longer-than-15"}, "--dummy-if-name"},
		{[]string{"--server-addr=a:1", "--pool-mode=mesh"}, "--pool-mode"},
		{[]string{"--server-addr=a:1", "--pool-mode=lease"}, "--pool-mode"},
		{[]string{"--server-addr=a:1", "--pool-mode=lease", "--nodepool-name=p"}, "--pool-bind-address"},
		{[]string{"--server-addr=a:1", "--pool-mode=lease", "--nodepool-name=p", "--pool-bind-address=0.0.0.0"}, "--pool-bind-address"},
		{[]string{"--server-addr=a:1", "--pool-mode=lease", "--nodepool-name=p", "--pool-bind-address=10.0.0.5", "--pool-port=0"}, "--pool-port"},
		{[]string{"--server-addr=a:1", "--pool-mode=lease", "--nodepool-name=p", "--pool-bind-address=10.0.0.5", "--pool-leader-timeout=1ms"}, "--pool-leader-timeout"},
		{[]string{"--server-addr=a:1", "--pool-scope-resources=services"}, "--pool-scope-resources"},
	} {
		_, err := parseFlags(tt.args, io.Discard)
		if err == nil {
			t.Errorf("%v: no error", tt.args)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, tt.want) || strings.Contains(msg, "\n") {
			t.Errorf("%v: error %q should be one line naming %q", tt.args, msg, tt.want)
		}
	}
}

func TestRunExitCodes(t *testing.T) {
	if code := run([]string{"--version"}); code != 0 {
		t.Fatalf("--version exit %d", code)
	}
	if code := run([]string{"--lb-mode=x", "--server-addr=a:1"}); code != 2 {
		t.Fatalf("bad flag exit %d, want 2", code)
	}
}

func TestDummyIfIPDefaultFollowsTheNodesFamily(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--server-addr=https://10.0.0.1:6443"}, "169.254.2.1"},
		{[]string{"--server-addr=https://[fd00::1]:6443"}, "fd00::2:1"},
		{[]string{"--server-addr=https://[fd00::1]:6443", "--dummy-if-ip=169.254.2.9"}, "169.254.2.9"},
		{[]string{"--server-addr=https://10.0.0.1:6443", "--bind-proxy-address=::1"}, "fd00::2:1"},
	} {
		o, err := parseFlags(append(tt.args, "--node-name=n"), io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		if o.dummyIfIP != tt.want {
			t.Errorf("%v: --dummy-if-ip %q, want %q", tt.args, o.dummyIfIP, tt.want)
		}
	}
}

// yurthubV17Flags are YurtHub v1.7's flags (its options, and the global flags its libraries
// register: klog's and component-base's logging flags, controller-runtime's --kubeconfig), each
// with a value a manifest could carry ("" for a bool given alone).
var yurthubV17Flags = map[string]string{
	"bind-address": "127.0.0.1", "serve-port": "10267", "bind-proxy-address": "127.0.0.1",
	"proxy-port": "10261", "proxy-secure-port": "10268", "namespace": "kube-system",
	"server-addr": "https://10.0.0.1:6443", "hub-cert-organizations": "org1,org2",
	"gc-frequency": "120", "node-name": "edge-1", "lb-mode": "rr", "heartbeat-failed-retry": "3",
	"heartbeat-healthy-threshold": "2", "heartbeat-timeout-seconds": "2",
	"heartbeat-interval-seconds": "10", "max-requests-in-flight": "250",
	"join-token": "abcdef.0123456789abcdef", "bootstrap-mode": "kubeletcertificate",
	"bootstrap-file": "README.md", "root-dir": "/var/lib/yurthub", "version": "false", "profiling": "true",
	"enable-dummy-if": "true", "enable-iptables": "false", "dummy-if-ip": "169.254.2.1",
	"dummy-if-name": "yurthub-dummy0", "disk-cache-path": "/etc/kubernetes/cache/",
	"access-server-through-hub": "true", "enable-resource-filter": "true",
	"disabled-resource-filters": "masterservice", "nodepool-name": "pool-a",
	"working-mode": "edge", "kubelet-health-grace-period": "40s", "enable-node-pool": "true",
	"min-request-timeout": "30m0s", "discovery-token-ca-cert-hash": "sha256:" + strings.Repeat("ab", 32),
	"discovery-token-unsafe-skip-ca-verification": "true", "enable-coordinator": "false",
	"coordinator-server-addr":    "https://yurt-coordinator-apiserver:443",
	"coordinator-storage-prefix": "/registry", "coordinator-storage-addr": "https://yurt-coordinator-etcd:12379",
	"leader-elect": "true", "leader-elect-lease-duration": "15s", "leader-elect-renew-deadline": "10s",
	"leader-elect-retry-period": "2s", "leader-elect-resource-lock": "leases",
	"leader-elect-resource-name": "yurthub", "leader-elect-resource-namespace": "kube-system",
	"enable-pool-service-topology": "true", "host-control-plane-address": "10.0.0.9:6443",
	"pool-scope-resources": "/v1/services,discovery.k8s.io/v1/endpointslices",
	"multiplexer-port":     "10269", "node-ip": "10.0.0.5", "kubeconfig": "/etc/kubernetes/kubelet.conf",
	// logging
	"v": "2", "add-dir-header": "", "alsologtostderr": "", "log-backtrace-at": ":0", "log-dir": "/var/log",
	"log-file": "/var/log/yurthub.log", "log-file-max-size": "1800", "log-flush-frequency": "5s",
	"logtostderr": "true", "one-output": "", "skip-headers": "", "skip-log-headers": "",
	"stderrthreshold": "2", "vmodule": "proxy=4",
}

func TestEveryYurtHubV17FlagParses(t *testing.T) {
	for name, value := range yurthubV17Flags {
		arg := "--" + name
		if value != "" {
			arg += "=" + value
		}
		args := []string{"--server-addr=https://10.0.0.1:6443", "--node-name=edge-1", "--discovery-token-unsafe-skip-ca-verification", arg}
		if _, err := parseFlags(args, io.Discard); err != nil {
			t.Errorf("%s: %v", arg, err)
		}
		// YurtHub's flag library takes '_' for '-' in names.
		if strings.Contains(name, "-") {
			n, v, _ := strings.Cut(arg, "=")
			args[len(args)-1] = "--" + strings.ReplaceAll(n[2:], "-", "_") + "=" + v
			if _, err := parseFlags(args, io.Discard); err != nil {
				t.Errorf("%s: %v", args[len(args)-1], err)
			}
		}
	}
}

func TestYurtHubNamesTakeEffect(t *testing.T) {
	o, err := parseFlags([]string{"--server-addr=https://10.0.0.1:6443", "--node-name=edge-1",
		"--multiplexer-port=10300", "--node-ip=10.0.0.5", "--kubelet-ca-file=/ca.pem", "--kubelet-client-certificate=/c.pem",
		"--hub-cert-organizations=a", "--hub-cert-organizations=b", "--disabled-resource-filters=masterservice",
		"--pool-scope-resources=/v1/services", "--pool-scope-resources=discovery.k8s.io/v1/endpointslices",
		"--log_file=/var/log/yurthub.log", "--logtostderr=false", "--kubeconfig=/x", "--log-file=/y"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.poolPort != 10300 || o.poolBindAddress != "10.0.0.5" || o.caFile != "/ca.pem" || o.clientCert != "/c.pem" {
		t.Fatalf("aliases: pool port %d, pool address %q, ca %q, cert %q", o.poolPort, o.poolBindAddress, o.caFile, o.clientCert)
	}
	if o.hubCertOrgs != "a,b" || o.filterDisabled != "masterservice" || o.poolResources != "/v1/services,discovery.k8s.io/v1/endpointslices" {
		t.Fatalf("repeated list flags append (pflag's StringSlice): orgs %q, filters %q, pool %q", o.hubCertOrgs, o.filterDisabled, o.poolResources)
	}
	if got := strings.Join(o.ignored, ","); got != "log-file,logtostderr,kubeconfig" {
		t.Fatalf("ignored flags %q, each once in the order first set", got)
	}
	// Defaults are kept when the YurtHub names are absent.
	o, err = parseFlags([]string{"--server-addr=https://10.0.0.1:6443", "--node-name=edge-1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.poolPort != 10269 || o.poolBindAddress != "" || o.poolResources != "/v1/services,discovery.k8s.io/v1/endpointslices" {
		t.Fatalf("defaults: %d %q %q", o.poolPort, o.poolBindAddress, o.poolResources)
	}
}

func TestWorkingModeLocalIsRefusedInOneLine(t *testing.T) {
	_, err := parseFlags([]string{"--server-addr=10.0.0.1:6443", "--node-name=n", "--working-mode=local"}, io.Discard)
	if err == nil {
		t.Fatal("--working-mode=local accepted")
	}
	if msg := err.Error(); !strings.Contains(msg, "--working-mode: local is not supported") || !strings.Contains(msg, "local mode") || strings.Contains(msg, "\n") {
		t.Fatalf("error %q should be one line saying local mode is not supported", msg)
	}
	if code := run([]string{"--server-addr=10.0.0.1:6443", "--working-mode=local"}); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
}

func TestHelpShowsOnlyFlagsThatWork(t *testing.T) {
	var out strings.Builder
	if _, err := parseFlags([]string{"--help"}, &out); err != errHelp {
		t.Fatalf("--help: %v", err)
	}
	help := out.String()
	for _, f := range yurthubIgnored {
		if strings.Contains(help, "  -"+f.name+" ") || strings.Contains(help, "  -"+f.name+"\n") {
			t.Errorf("--help lists ignored flag --%s", f.name)
		}
	}
	for alias, target := range yurthubAliases {
		if strings.Contains(help, "  -"+alias+" ") {
			t.Errorf("--help lists alias --%s", alias)
		}
		if !strings.Contains(help, "  -"+target+" ") {
			t.Errorf("--help misses --%s", target)
		}
	}
	if strings.Contains(help, "not implemented") || strings.Contains(help, "ignored") {
		t.Errorf("--help mentions ignored flags:\n%s", help)
	}
	if !strings.Contains(help, "-pool-port int") || !strings.Contains(help, "(default 10269)") {
		t.Errorf("--help lost types or defaults:\n%s", help)
	}
}

// docs/flags.md's table of ignored flags is the one place that says why each is ignored.
func TestFlagsDocListsEachIgnoredAndMappedFlagOnce(t *testing.T) {
	readme, err := os.ReadFile("docs/flags.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range yurthubIgnored {
		if n := strings.Count(string(readme), "| `--"+f.name+"` |"); n != 1 {
			t.Errorf("docs/flags.md has %d table rows for ignored flag --%s, want 1", n, f.name)
		}
	}
	for alias := range yurthubAliases {
		if n := strings.Count(string(readme), "| `--"+alias+"` |"); n != 1 {
			t.Errorf("docs/flags.md has %d table rows for YurtHub name --%s, want 1", n, alias)
		}
	}
}
