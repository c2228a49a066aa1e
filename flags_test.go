package main

import (
	"io"
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
